"""Builders for the engine tests and the bench: small installed trees and cookbooks written from text.

A "site" is a site-packages-like folder with dist-info (METADATA, RECORD, direct_url.json) and a
package with ``_version.py``; a "cookbook" has ``fixes/<id>/`` and ``profiles/<name>.toml``, its
patches rendered from before/after text and locked against a pristine source tree.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import subprocess
import sys
import textwrap
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from fixpack.commands.maintain.authoring.lock import fingerprints, write  # noqa: E402
from fixpack.cookbook.catalog import Catalog  # noqa: E402
from fixpack.core.patch import render  # noqa: E402

GAUDI_COMMIT = "b059f9c95d6a07f19eb00aa06d1ec8b87b296437"
VLLM_COMMIT = "568afb3a13806beb53bb2e6bd518269357b237c0"

# The pristine "release": two small distributions with a few modules each.
PRISTINE = {
    "vllm": {
        "vllm/__init__.py": "",
        "vllm/sampler.py": "def sample(x):\n    return x\n\n\ndef temperature():\n    return 1.0\n",
        "vllm/executor.py": (
            "class Worker:\n    def loop(self):\n        try:\n            step()\n"
            "        except Exception:\n            log()\n"
        ),
    },
    "vllm-gaudi": {
        "vllm_gaudi/__init__.py": "",
        "vllm_gaudi/runner.py": "".join(f"def f{i}():\n    return {i}\n\n\n" for i in range(30)),
        "vllm_gaudi/batch.py": (
            "class Batch:\n    def swap(self, a, b):\n        self.rows[a], self.rows[b] = self.rows[b], self.rows[a]\n"
        ),
    },
}
PACKAGES = {"vllm": "vllm", "vllm-gaudi": "vllm_gaudi"}


def _record_line(rel: str, content: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(content).digest()).rstrip(b"=").decode()
    return f"{rel},sha256={digest},{len(content)}"


def write_dist(
    site: Path,
    name: str,
    version: str,
    files: dict[str, str | bytes],
    commit: str | None = None,
    editable_root: Path | None = None,
    direct_url: dict | None = None,
) -> Path:
    """Install ``files`` as pip would: into ``site`` (or, editable, into ``editable_root``)."""
    package = PACKAGES[name]
    dist_info = site / f"{package}-{version}.dist-info"
    dist_info.mkdir(parents=True)
    root = editable_root or site
    record = []
    all_files = dict(files)
    if commit is not None:
        all_files[f"{package}/_version.py"] = (
            f"__version__ = version = {version.split('+')[0]!r}\n__commit_id__ = commit_id = {'g' + commit[:9]!r}\n"
        )
    for rel, text in all_files.items():
        content = text if isinstance(text, bytes) else text.encode()
        target = root / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(content)
        if editable_root is None:
            record.append(_record_line(rel, content))
    (dist_info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
    (dist_info / "INSTALLER").write_text("pip\n")
    if editable_root is not None:
        direct_url = {"url": editable_root.as_uri(), "dir_info": {"editable": True}}
    if direct_url is not None:
        (dist_info / "direct_url.json").write_text(json.dumps(direct_url))
    for meta in sorted(dist_info.iterdir()):  # as pip lists them: every file of the dist-info
        record.append(_record_line(f"{dist_info.name}/{meta.name}", meta.read_bytes()))
    record.append(f"{dist_info.name}/RECORD,,")
    (dist_info / "RECORD").write_text("\n".join(record) + "\n")
    return dist_info


@dataclass
class Site:
    path: Path
    roots: dict[str, Path]  # dist -> where its files are

    def file(self, rel: str) -> Path:
        dist = "vllm-gaudi" if rel.startswith("vllm_gaudi/") else "vllm"
        return self.roots[dist] / rel

    def read(self, rel: str) -> bytes:
        return self.file(rel).read_bytes()

    def snapshot(self) -> dict[str, tuple[bytes, int]]:
        """Every file under the site and roots (content and mtime), to compare before and after."""
        out = {}
        for root in {self.path, *self.roots.values()}:
            for p in sorted(root.rglob("*")):
                if p.is_file():
                    out[str(p)] = (p.read_bytes(), p.stat().st_mtime_ns)
        return out


def make_site(
    tmp: Path,
    files: dict[str, dict[str, str | bytes]] | None = None,
    commits: dict[str, str | None] | None = None,
    versions: dict[str, str] | None = None,
    editable: bool = False,
) -> Site:
    files = files or PRISTINE
    commits = commits if commits is not None else {"vllm": VLLM_COMMIT, "vllm-gaudi": GAUDI_COMMIT}
    versions = versions or {"vllm": "0.26.0", "vllm-gaudi": "0.26.0"}
    site = tmp / "site"
    site.mkdir(parents=True, exist_ok=True)
    roots = {}
    for name, dist_files in files.items():
        editable_root = tmp / f"checkout-{name}" if editable and name == "vllm-gaudi" else None
        write_dist(site, name, versions[name], dist_files, commits.get(name), editable_root)
        roots[name] = editable_root or site
    return Site(site, roots)


@dataclass
class Cookbook:
    root: Path
    sources: dict[str, Path] = field(default_factory=dict)

    def fix(
        self,
        fix_id: str,
        edits: dict[str, tuple[str | bytes | None, str | bytes | None]],
        *,
        requires: tuple[str, ...] = (),
        conflicts: tuple[str, ...] = (),
        opt_in: bool = False,
        release: str = "v0.26.0",
        title: str | None = None,
        proof: str | None = None,
    ) -> Path:
        """A fix whose patch turns each file's ``before`` text into ``after`` (None: absent)."""
        d = self.root / "fixes" / fix_id
        d.mkdir(parents=True, exist_ok=True)
        patch = "".join(render(p, _b(a), _b(b)) for p, (a, b) in edits.items())
        (d / f"{release}.patch").write_bytes(patch.encode("utf-8", "surrogateescape"))
        level = "demonstrated" if proof else "none"
        (d / "fix.toml").write_text(
            textwrap.dedent(
                f"""\
                id = "{fix_id}"
                title = "{title or "Fix " + fix_id}"
                why = "Because {fix_id} is broken: the test tree returns a wrong value, and this corrects it."
                requires = {json.dumps(list(requires))}
                conflicts = {json.dumps(list(conflicts))}
                opt_in = {str(opt_in).lower()}
                verified_on = "tests"

                [upstream]
                status = "pending"

                [proof]
                level = "{level}"
                reason = "{"" if proof else "test fix"}"

                [release."{release}"]
                patch = "{release}.patch"
                """
            )
        )
        if proof:
            (d / "proof.py").write_text(proof)
        return d

    def profile(
        self,
        pack: list[str],
        opt_ins: list[str] = (),  # type: ignore[assignment]
        name: str = "v0.26.0",
        release: str = "v0.26.0",
        commits: dict[str, list[str]] | None = None,
        dists: tuple[str, ...] = tuple(PACKAGES),
        match: str = "commit",
        instead: dict[str, str] | None = None,
    ) -> Path:
        """A profile pinning ``dists`` (each at 0.26.0, ``match`` for every pin); ``instead``: its
        [instead] table (a distribution -> the profile to use where it is installed)."""
        commits = commits or {"vllm-gaudi": [GAUDI_COMMIT], "vllm": [VLLM_COMMIT, "ffd46bfab"]}
        pins = "".join(
            f'\n[[pin]]\ndist = "{dist}"\npackage = "{PACKAGES[dist]}"\nversion = "0.26.0"\n'
            f"commits = {json.dumps(commits[dist])}\nmatch = {json.dumps(match)}\n"
            for dist in dists
        )
        table = "".join(f"{dist} = {json.dumps(other)}\n" for dist, other in (instead or {}).items())
        path = self.root / "profiles" / f"{name}.toml"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(
            f'release = "{release}"\ndescription = "test profile"\npack = {json.dumps(pack)}\n'
            f"opt_ins = {json.dumps(list(opt_ins))}\n" + (f"\n[instead]\n{table}" if table else "") + pins
        )
        return path

    def lock(self, profile: str = "v0.26.0") -> None:
        catalog = Catalog.load(self.root)
        prof = catalog.profile(profile)
        write(catalog, prof, fingerprints(catalog, prof, self.sources))


def _b(text: str | bytes | None) -> bytes | None:
    return text.encode() if isinstance(text, str) else text


def has_commit(repo: Path, rev: str) -> bool:
    """Whether the git repository ``repo`` holds the commit ``rev``."""
    return (
        subprocess.run(["git", "-C", str(repo), "cat-file", "-e", f"{rev}^{{commit}}"], capture_output=True).returncode
        == 0
    )


def run_cli(*args: str, env: dict[str, str] | None = None, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """Run ``python -m fixpack ARGS`` in a fresh process."""
    full_env = dict(os.environ, PYTHONPATH=str(REPO))
    full_env.update(env or {})
    return subprocess.run(
        [sys.executable, "-m", "fixpack", *args], capture_output=True, text=True, env=full_env, timeout=timeout
    )


RUNNER = PRISTINE["vllm-gaudi"]["vllm_gaudi/runner.py"]
SAMPLER = PRISTINE["vllm"]["vllm/sampler.py"]
BATCH = PRISTINE["vllm-gaudi"]["vllm_gaudi/batch.py"]


def in_child_as(uid: int, work: Callable[[], int]) -> tuple[int, str]:
    """Run ``work`` in a forked child that is ``uid`` (gid too, no other groups), so that the
    kernel, not os.access, decides what it may read and write; returns (its exit code, its stdout
    and stderr). Forked rather than started: this interpreter may live where that user cannot read."""
    import io
    import traceback

    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:
        code = 70
        try:
            os.close(read)
            sys.stdout = sys.stderr = io.TextIOWrapper(os.fdopen(write, "wb"), line_buffering=True)
            os.setgroups([])
            os.setgid(uid)
            os.setuid(uid)
            code = work()
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else 1
        except BaseException:
            traceback.print_exc()
        finally:
            sys.stdout.flush()
            os._exit(code)
    os.close(write)
    with os.fdopen(read) as fh:
        output = fh.read()
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status), output
