"""``fixpack record NEW-ID --from-commit DIR REV``: a new fix made from an upstream commit, to be
given a proof like any other.

REV is a commit (its change against its first parent: for a merge, what it brought to the main
line) or a range ``BASE..TIP``; DIR any git repository that has it (a clone, a work tree, a bare
mirror), read with git and never written. Only the files under the profile's pinned packages are
taken (``vllm_gaudi/...``, ``vllm/...``); tests, docs and CI files are left out and listed. Each
file's upstream change is applied to the pinned release's file (``--source``, with the offsets the
diff engine allows), rendered against it, and fingerprinted where ``fixpack lock`` will take it, at
the end of the pack. fix.toml gets the commit's subject as title, its message as why, and
``origin`` the commit.
"""

from __future__ import annotations

import re
from pathlib import Path

from ....cookbook.catalog import Catalog
from ....cookbook.fix_module import backport_skeleton, load_fix
from ....core import patch, rebuild
from ....errors import Refused, UsageError
from ....installation.files import write_output
from ....models import Profile
from ..history import Repo
from . import lock
from .record import Recorded, fingerprint_at_end, new_fix_dir

__all__ = ["record_commit"]

_TRAILER = re.compile(r"^(Signed-off-by|Co-authored-by|Reviewed-by|Acked-by|Change-Id):", re.IGNORECASE)


def _range(repo: Repo, rev: str) -> tuple[str, str]:
    base_rev, dots, tip_rev = rev.partition("..")
    tip = repo.commit(tip_rev if dots else rev)
    base = repo.commit(base_rev) if dots else (repo.parent(tip) if tip else None)
    if tip is None or base is None:
        raise UsageError(f"--from-commit {repo.root} {rev}: not a commit (or a range BASE..TIP) of that repository")
    return base, tip


def _why(tip: str, base: str, body: str) -> str:
    kept = "\n".join(line for line in body.splitlines() if not _TRAILER.match(line.strip())).strip()
    made = f"Made from upstream commit {tip} (against {base[:12]}) by fixpack record --from-commit."
    todo = "TODO: what breaks and where, the mechanism, and what the change does."
    return f"{kept or todo}\n\n{made}"


def _port(profile: Profile, sources: dict[str, Path], path: str, upstream: str) -> tuple[bytes | None, bytes | None]:
    """The pinned release's file and that file with the upstream change applied."""
    pristine = lock.read_source(sources, profile, path)
    (fd,) = patch.split_files(upstream)
    try:
        return pristine, patch.apply(fd, pristine)
    except patch.HunkFailed as exc:
        raise Refused(
            f"{path}: the upstream change does not apply to release {profile.release}'s file: {exc}; "
            "port it by hand (fixpack record from the edited files)",
            details=exc.nearest,
        ) from None


def record_commit(
    catalog: Catalog, fix_id: str, profile_name: str, repo_dir: Path, rev: str, sources: dict[str, Path]
) -> Recorded:
    fix_dir = new_fix_dir(catalog, fix_id)
    profile = catalog.profile(profile_name)
    repo = Repo.at(repo_dir)
    if repo is None:
        raise UsageError(f"--from-commit {repo_dir}: not a git repository")
    base, tip = _range(repo, rev)
    changed = repo.changed(base, tip)
    taken = [p for p in changed if profile.pin_for_path(p) is not None]
    left_out = [p for p in changed if p not in taken]
    if not taken:
        packages = ", ".join(f"{p.package}/" for p in profile.pins)
        raise Refused(f"{rev} ({tip[:12]}) changes no file under {packages}: nothing to make a fix of")
    missing = sorted({pin.dist for p in taken if (pin := profile.pin_for_path(p)) and pin.dist not in sources})
    if missing:
        raise UsageError(f"the commit is ported to the pinned tree of {missing[0]}: give --source {missing[0]}=DIR")
    patches, prints = {}, {}
    for path in taken:
        upstream = patch.render(path, repo.show(base, path), repo.show(tip, path))
        pristine, ported = _port(profile, sources, path, upstream)
        patches[path] = patch.render(path, pristine, ported)
        prints[path] = fingerprint_at_end(catalog, profile, path, pristine, patches[path])
    subject, body = repo.message(tip)
    fix_dir.mkdir(parents=True)
    text = backport_skeleton(fix_id, profile.release, subject or "TODO", _why(tip, base, body), tip)
    write_output(fix_dir / "fix.toml", text.encode())
    write_output(fix_dir / f"{profile.release}.patch", "".join(patches.values()).encode(patch.ENC, patch.ERRORS))
    fix = load_fix(fix_dir)
    lock.write(Catalog({**catalog.fixes, fix_id: fix}, catalog.profiles, catalog.root), profile, {fix_id: prints})
    files = [(c.path, *rebuild.line_counts(c)) for c in fix.changes[profile.release]]
    notes = [f"left out (not under a pinned package): {', '.join(left_out)}"] if left_out else []
    notes.append(f"add {fix_id!r} to the pack of profiles/{profile.name}.toml (its fingerprints assume the end)")
    return Recorded(fix_dir, files, [], notes)
