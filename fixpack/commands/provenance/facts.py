"""What a site (or an overlay) has applied, as its SBOM records it: the pinned distributions with
the commit fixpack read, each fix's patch per distribution with the diff ``fixpack diff`` gives,
the patched files with their hashes, the runtime check's files, and the fix set. Nothing of
CycloneDX here: ``sbom`` turns this into a document.

The patch type, from the fix's ``[upstream]`` fields (fix.toml records no merge of a pull request,
so only what the fields say decides):

- no ``origin``: ``unofficial`` (the cookbook's own change);
- an ``origin`` and ``applied-upstream``: ``backport`` (upstream's main line has the change);
- an ``origin`` and ``regressed-in``: ``cherry-pick`` (the origin is on a release branch the main
  line lost);
- an ``origin`` that is a commit (``[owner/repo@]SHA`` or a ``/commit/`` URL): ``backport`` (a
  commit named as origin is taken to be on the main line or a later release; verify checks that it
  is not in the pinned one);
- any other ``origin`` (a pull request: ``owner/repo#N`` or a ``/pull/`` URL): ``cherry-pick``.

``resolves``: one defect per ``bug`` reference, each with the pull requests and commits the fix
names (``origin``, ``forwarded``, ``applied-upstream``) as its references; a fix with no ``bug``:
one defect named by the fix's id and title. Each issue's description names the fix (a CycloneDX
patch has no field for it). No fix of the pack records a vulnerability: every
issue is a defect."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from ...cookbook.catalog import Catalog
from ...core.fingerprint import sha256
from ...core.identity import FixSet
from ...core.plan import resolve, restrict
from ...errors import Refused
from ...installation import plugin
from ...installation.destination import Where
from ...installation.distributions import Distribution, Environment
from ...installation.manifest import Manifest
from ...installation.state import read_file
from ...models import Fix, Upstream
from ..install.pins import all_pins
from ..install.pipeline import holds_plan
from ..install.status import status
from ..maintain.upstream.diff import messages

__all__ = [
    "BACKPORT", "CHERRY_PICK", "UNOFFICIAL", "REPOSITORIES", "Issue", "AppliedPatch", "PatchedDist", "RuntimeCheck",
    "Provenance", "patch_type", "issues", "url", "applied",
]  # fmt: skip

BACKPORT, CHERRY_PICK, UNOFFICIAL = "backport", "cherry-pick", "unofficial"
# Where each distribution's sources live upstream (commit URLs, a bare commit in [upstream]).
REPOSITORIES = {"vllm": "vllm-project/vllm", "vllm-gaudi": "vllm-project/vllm-gaudi"}
_NUMBERED = re.compile(r"([A-Za-z0-9][\w.-]*/[\w.-]+)#([0-9]+)\Z")  # owner/repo#N
_COMMIT = re.compile(r"(?:([A-Za-z0-9][\w.-]*/[\w.-]+)@)?([0-9a-f]{7,40})\Z")  # [owner/repo@]SHA


@dataclass(frozen=True, slots=True)
class Issue:
    """A defect a patch resolves: a bug reference (``owner/repo#N``, a URL) or, without one, the fix."""

    id: str
    name: str | None
    description: str  # names the fix, which a CycloneDX patch has no field for
    references: tuple[str, ...]  # URLs


@dataclass(frozen=True, slots=True)
class AppliedPatch:
    fix: Fix
    dist: str
    diff: str  # as ``fixpack diff FIX --dist DIST`` prints it (without the fixes FIX requires)
    type: str  # BACKPORT, CHERRY_PICK or UNOFFICIAL
    resolves: tuple[Issue, ...]


@dataclass(frozen=True, slots=True)
class PatchedDist:
    dist: Distribution
    files: tuple[tuple[str, str], ...]  # (repository path, sha256 after the fixes), sorted; deleted files left out
    patches: tuple[AppliedPatch, ...]  # in plan order


@dataclass(frozen=True, slots=True)
class RuntimeCheck:
    name: str
    version: str
    files: tuple[tuple[str, str], ...]  # (path under the folder that holds it, sha256), sorted


@dataclass(frozen=True, slots=True)
class Provenance:
    profile: str
    release: str
    fix_set: FixSet
    opt_ins: tuple[str, ...]  # the applied fixes that are opt-ins of the profile, in applied order
    mode: str  # "in-place" or "overlay"
    dists: tuple[PatchedDist, ...]  # the profile's pins, in its order
    runtime: RuntimeCheck | None  # None when its files are not there


def url(ref: str, repo: str, numbered: str = "issues") -> str | None:
    """An ``[upstream]`` reference as a URL: a URL as it is; ``owner/repo#N`` under ``numbered``
    (``issues``, which GitHub also redirects for a pull request, or ``pull``); ``[owner/repo@]SHA``
    as a commit of ``owner/repo`` (default ``repo``). None for anything else (``no``, ``not-needed``)."""
    if re.match(r"https?://", ref):
        return ref
    if m := _NUMBERED.match(ref):
        return f"https://github.com/{m[1]}/{numbered}/{m[2]}"
    if m := _COMMIT.match(ref):
        return f"https://github.com/{m[1] or repo}/commit/{m[2]}"
    return None


def _is_commit(ref: str) -> bool:
    return bool(_COMMIT.match(ref)) or bool(re.match(r"https?://\S+/commit/[0-9a-f]{7,40}/?\Z", ref))


def patch_type(up: Upstream) -> str:
    """The rule of the module's docstring."""
    if not up.origin:
        return UNOFFICIAL
    if up.applied_upstream:
        return BACKPORT
    if up.regressed_in:
        return CHERRY_PICK
    return BACKPORT if _is_commit(up.origin) else CHERRY_PICK


def issues(fix: Fix, repo: str) -> tuple[Issue, ...]:
    """What the fix resolves (the module's docstring); ``repo``: the distribution's, for a bare commit."""
    up = fix.upstream
    named = ((up.origin, "pull"), (up.forwarded, "issues"), (up.applied_upstream, "pull"))
    refs = tuple(dict.fromkeys(u for ref, kind in named if ref and (u := url(ref, repo, kind))))
    said = f"resolved by fixpack fix {fix.id}: {fix.title}"
    if not up.bug:
        return (Issue(fix.id, fix.title, said, refs),)
    out = []
    for bug in up.bug:
        own = url(bug, repo)
        out.append(Issue(bug, None, said, tuple(dict.fromkeys(((own,) if own else ()) + refs))))
    return tuple(out)


def applied(catalog: Catalog, chosen: Where) -> Provenance:
    """What is applied in the ``chosen`` destination, as ``fixpack status`` finds it. Refused (exit
    1) when nothing is, when the fix set does not hold (a patched file changed since), or when the
    cookbook's patches are not the ones applied (a checkout of another cookbook): the document would
    not be what runs."""
    where = chosen.where
    st = status(catalog, None, chosen)
    manifest = st.manifest
    if st.profile is None or manifest is None or manifest.empty:
        raise Refused(f"no fixes are applied {where}: there is no patch to record (apply first)")
    fix_set = st.fix_set
    if fix_set is None:
        raise Refused(f"the fix set applied {where} does not hold ({st.no_fix_set}): apply again before recording it")
    profile = catalog.profile(st.profile)
    opt_ins = tuple(f for f in manifest.fixes if f in profile.opt_ins)
    plan = restrict(resolve(catalog.fixes, profile, opt_ins), set(manifest.fixes))
    if plan.fix_ids != manifest.fixes or not holds_plan(manifest, plan, profile, (manifest.recipe, manifest.rules)):
        raise Refused(
            f"the fixes applied {where} are not this cookbook's ({catalog.root}): its patches differ from those "
            "recorded at apply time; record the site with the cookbook that applied it"
        )
    by_dist: dict[str, list[AppliedPatch]] = {}
    for m in messages(plan):
        repo = REPOSITORIES.get(m.dist, "")
        by_dist.setdefault(m.dist, []).append(
            AppliedPatch(m.fix, m.dist, m.patch, patch_type(m.fix.upstream), issues(m.fix, repo))
        )
    found = {d.name: d for d in st.distributions}
    dists = tuple(
        PatchedDist(found[pin.dist], _patched_files(manifest, pin.dist), tuple(by_dist.get(pin.dist, ())))
        for pin in profile.pins
    )
    target = chosen.open(Environment.read(all_pins(catalog), chosen.site))
    assert target is not None  # status found the distributions
    return Provenance(
        profile.name,
        profile.release,
        fix_set,
        opt_ins,
        target.mode,
        dists,
        _runtime_check(target.state_dir.parent, target.own_files),
    )


def _patched_files(manifest: Manifest, dist: str) -> tuple[tuple[str, str], ...]:
    """(path, sha256 after the fixes) of each file of ``dist`` the fixes left, sorted."""
    rows = []
    for path, record in manifest.files.items():
        if record.dist == dist and record.applied is not None:
            rows.append((path, record.applied))
    return tuple(sorted(rows))


def _runtime_check(root: Path, own_files: tuple[str, ...]) -> RuntimeCheck | None:
    """The runtime check's modules and the destination's other ``own_files`` (an overlay's start-up
    hook) as they are in ``root``; its index is left out: in place it names absolute paths, which a
    copy of the site changes."""
    if read_file(root / plugin.DIST_INFO / "METADATA") is None:
        return None
    rows = []
    for rel in sorted(own_files):
        digest = sha256(read_file(root / rel))
        if digest is not None:
            rows.append((rel, digest))
    return RuntimeCheck(plugin.NAME, plugin.VERSION, tuple(rows))
