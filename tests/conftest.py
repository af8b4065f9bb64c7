"""Fixtures the engine test modules share; the helpers they use are in ``builders.py`` and the
modules beside it (``realtree``, ``cookbooks``, ``trees``, ``runs``, ``nonroot``, ``shipped_recipe``),
never in another test module (test_suite_layout.py)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

# The suite runs the same whatever the caller's shell has: no bytecode written (as where it was
# built), so that an apply writes no .pyc (and a test's site holds only the files it wrote) unless
# the test asks for it, as test_staged_commit.py and test_overlay.py do.
os.environ["PYTHONDONTWRITEBYTECODE"] = "1"
sys.dont_write_bytecode = True

from builders import GAUDI_COMMIT, PRISTINE, Cookbook, Site, make_site, write_dist  # noqa: E402
from cookbooks import three_fixes  # noqa: E402
from nonroot import pycs  # noqa: E402
from realtree import SRC_GAUDI, SRC_VLLM, package_files  # noqa: E402

# git's identity, as fixpack diff reads it (user.name and user.email), is the same whatever the
# caller's ~/.gitconfig holds: a file of the tests' own instead of it, and none of git's variables.
GIT_IDENTITY = ("fixpack tests", "tests@fixpack.invalid")


@pytest.fixture(autouse=True)
def git_identity(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> Path:
    config = tmp_path_factory.getbasetemp() / "gitconfig"
    if not config.exists():
        config.write_text(f"[user]\n\tname = {GIT_IDENTITY[0]}\n\temail = {GIT_IDENTITY[1]}\n")
    monkeypatch.setenv("GIT_CONFIG_GLOBAL", str(config))
    for var in ("GIT_AUTHOR_NAME", "GIT_AUTHOR_EMAIL", "GIT_COMMITTER_NAME", "GIT_COMMITTER_EMAIL"):
        monkeypatch.delenv(var, raising=False)
    return config


@pytest.fixture
def pristine_sources(tmp_path: Path) -> dict[str, Path]:
    roots = {}
    for dist, files in PRISTINE.items():
        root = tmp_path / "src" / dist
        for rel, text in files.items():
            (root / rel).parent.mkdir(parents=True, exist_ok=True)
            (root / rel).write_text(text)
        roots[dist] = root
    return roots


@pytest.fixture
def cookbook(tmp_path: Path, pristine_sources: dict[str, Path], monkeypatch: pytest.MonkeyPatch) -> Cookbook:
    book = Cookbook(tmp_path / "cookbook", pristine_sources)
    monkeypatch.setenv("FIXPACK_COOKBOOK", str(book.root))
    for var in ("FIXPACK_SRC_VLLM_GAUDI", "FIXPACK_SRC_VLLM", "FIXPACK_SITE"):  # the real trees are not these
        monkeypatch.delenv(var, raising=False)
    return book


@pytest.fixture
def site(tmp_path: Path) -> Site:
    return make_site(tmp_path)


@pytest.fixture
def shared(tmp_path: Path, pristine_sources: dict[str, Path]) -> Iterator[tuple[Cookbook, Site]]:
    """A cookbook and a site that another user can read (nonroot.py): under /tmp, not pytest's
    private folder."""
    root = Path("/tmp") / f"fixpack-hard-{os.getpid()}-{tmp_path.name}"
    root.mkdir(mode=0o755)
    os.chmod(root, 0o755)
    book = Cookbook(root / "cookbook", pristine_sources)
    three_fixes(book)
    site = make_site(root)
    pycs(site)
    for p in [root, *root.rglob("*")]:
        os.chmod(p, 0o755 if p.is_dir() else 0o644)
    try:
        yield book, site
    finally:
        shutil.rmtree(root)


@pytest.fixture
def cli():
    """Run ``fixpack ARGS`` in this process; exceptions propagate (a traceback fails the test)."""
    from click.testing import CliRunner

    from fixpack.cli import main

    def run(*args: str):
        return CliRunner().invoke(main, list(args), catch_exceptions=False)

    return run


@pytest.fixture(scope="session")
def gaudi_git(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """vllm-gaudi's history as a git repository, from $VLLM_GAUDI_GIT (a clone, a URL or a git
    bundle): read where it is when it is a repository here, else cloned once, its pull requests
    fetched (a clone of a bundle has no refs/pull/*). Tests check out what they need in a clone of
    their own (``git clone --shared``), so this one is never changed."""
    src = os.environ.get("VLLM_GAUDI_GIT")
    if not src:
        pytest.skip("VLLM_GAUDI_GIT is not set: vllm-gaudi's git history (a clone, a URL or a git bundle)")
    if Path(src).is_dir() and _git(src, "rev-parse", "--git-dir").returncode == 0:
        return Path(src)
    dest = tmp_path_factory.mktemp("vllm-gaudi-git") / "vllm-gaudi.git"
    if _git(None, "clone", "-q", "--bare", src, str(dest)).returncode:
        pytest.skip(f"VLLM_GAUDI_GIT={src}: git cannot clone it")
    _git(dest, "fetch", "-q", src, "refs/pull/*:refs/pull/*")  # none there is no failure: the tests say what lacks
    return dest


@pytest.fixture(scope="module")
def real_site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The real trees (realtree.py) laid out as pip leaves them: dist-info with RECORD, and
    _version.py with the commit. Built once per module: the real trees are large."""
    site = tmp_path_factory.mktemp("real") / "site"
    gaudi = package_files(Path(SRC_GAUDI), "vllm_gaudi")  # type: ignore[arg-type]
    gaudi.pop("vllm_gaudi/_version.py", None)
    write_dist(site, "vllm-gaudi", "0.26.0", gaudi, commit=GAUDI_COMMIT)
    vllm = package_files(Path(SRC_VLLM), "vllm")  # type: ignore[arg-type]
    write_dist(site, "vllm", "0.26.0", vllm)  # the wheel's own _version.py says gffd46bfab
    return site


def _git(repo: Path | str | None, *args: str) -> subprocess.CompletedProcess[bytes]:
    where = ["-C", str(repo)] if repo is not None else []
    return subprocess.run(["git", *where, *args], capture_output=True, check=False)
