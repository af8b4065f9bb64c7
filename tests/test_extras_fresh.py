"""Issue 57: each optional extra, installed alone from the checkout into a fresh venv (no other
package of this environment), runs the command its page shows; without it, the command exits 3
naming the line that installs it: sbom, accept, authoring (a transform's lock), docs (the site's
build); and after the README's test set-up (`test,proofs`) alone, verify of the whole pack on the
real trees, and --coverage of one fix, are green.

Installing takes a package index (or pip's configured local one) and about half a minute per venv:
asked for with FIXPACK_FRESH_VENVS=1, which .ci/run sets; skipped, saying so, otherwise."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from builders import REPO
from cookbooks import cst_only, three_fixes
from runs import one_line_error
from shipped_recipe import SLUG, with_recipe

from fixpack.extras import declared

pytestmark = pytest.mark.skipif(
    not os.environ.get("FIXPACK_FRESH_VENVS"),
    reason="FIXPACK_FRESH_VENVS is not set: each extra installed into a fresh venv (.ci/run sets it)",
)


def _venv(folder: Path, extra: str | None) -> Path:
    """A fresh venv with fixpack installed from this checkout, with ``extra`` (or none); its bin/."""
    subprocess.run([sys.executable, "-m", "venv", str(folder)], check=True, capture_output=True)
    target = f"{REPO}[{extra}]" if extra else str(REPO)
    done = subprocess.run(
        [str(folder / "bin" / "python"), "-m", "pip", "install", "-q", "--disable-pip-version-check", "-e", target],
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return folder / "bin"


def _run(bin_dir: Path, *args: str, root: Path) -> subprocess.CompletedProcess[str]:
    """``fixpack ARGS`` of the venv ``bin_dir``, on the cookbook at ``root``."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env.update(FIXPACK_COOKBOOK=str(root), PATH=f"{bin_dir}{os.pathsep}{env.get('PATH', '')}")
    return subprocess.run([str(bin_dir / "fixpack"), *args], capture_output=True, text=True, env=env, timeout=300)


@pytest.fixture(scope="module")
def bare(tmp_path_factory) -> Path:
    return _venv(tmp_path_factory.mktemp("bare") / "venv", None)


def test_sbom_extra_alone_writes_the_document(tmp_path, cookbook, site, bare):
    three_fixes(cookbook)
    where = ("--site", str(site.path))
    assert _run(bare, "apply", "--profile", "v0.26.0", *where, root=cookbook.root).returncode == 0
    without = _run(bare, "sbom", *where, root=cookbook.root)
    assert without.returncode == 3
    assert f"-m pip install -e '{REPO}[sbom]'" in one_line_error(without.stderr)
    with_sbom = _venv(tmp_path / "venv", "sbom")
    out = tmp_path / "bom.json"
    done = _run(with_sbom, "sbom", *where, "-o", str(out), root=cookbook.root)
    assert done.returncode == 0, done.stderr
    bom = json.loads(out.read_text())
    assert bom["specVersion"] == "1.6" and any(c.get("pedigree", {}).get("patches") for c in bom["components"])


def test_accept_extra_alone_reaches_for_the_server(tmp_path, cookbook, bare):
    with_recipe(cookbook)
    args = ("recipe", "accept", SLUG, "--url", "http://127.0.0.1:9")  # a port nothing listens on
    without = _run(bare, *args, root=cookbook.root)
    assert without.returncode == 3 and f"-m pip install -e '{REPO}[accept]'" in one_line_error(without.stderr)
    with_accept = _venv(tmp_path / "venv", "accept")
    done = _run(with_accept, *args, root=cookbook.root)
    line = one_line_error(done.stderr)
    assert done.returncode == 3 and "openai client" not in line and "127.0.0.1:9" in line, done.stderr


def test_authoring_extra_alone_locks_a_transform(tmp_path, cookbook, bare):
    fix = cst_only(cookbook)
    args = ("lock", "--profile", "v0.26.0", *(a for d, r in cookbook.sources.items() for a in ("--source", f"{d}={r}")))
    without = _run(bare, *args, root=cookbook.root)
    assert without.returncode == 3 and f"-m pip install -e '{REPO}[authoring]'" in one_line_error(without.stderr)
    assert not (fix / "v0.26.0.lock.json").exists()
    done = _run(_venv(tmp_path / "venv", "authoring"), *args, root=cookbook.root)
    assert done.returncode == 0, done.stderr
    assert "-    return 7\n+    return 777\n" in (fix / "v0.26.0.rendered.patch").read_text()


def test_docs_extra_alone_builds_the_site(tmp_path):
    bin_dir = _venv(tmp_path / "venv", "docs")
    built = subprocess.run(
        [
            str(bin_dir / "sphinx-build"),
            "-W",
            "--keep-going",
            "-q",
            "-b",
            "html",
            str(REPO / "docs"),
            str(tmp_path / "html"),
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert built.returncode == 0, built.stderr[-3000:]
    assert (tmp_path / "html" / "operators" / "when-it-refuses.html").is_file()


SRC_GAUDI, SRC_VLLM = os.environ.get("FIXPACK_SRC_VLLM_GAUDI"), os.environ.get("FIXPACK_SRC_VLLM")
real_trees = pytest.mark.skipif(
    not (SRC_GAUDI and SRC_VLLM), reason="FIXPACK_SRC_VLLM_GAUDI and FIXPACK_SRC_VLLM name the real trees"
)


def _verify(bin_dir: Path, *args: str) -> dict:
    done = _run(bin_dir, "verify", "--json", *args, f"--source=vllm-gaudi={SRC_GAUDI}", f"--source=vllm={SRC_VLLM}",
                root=REPO)  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return json.loads(done.stdout)


@real_trees
def test_the_readme_test_set_up_verifies_the_whole_pack_and_its_coverage(tmp_path):
    """The done-when of issue 57: exactly README's `pip install -e '.[test,proofs]'`, then verify of
    every profile on the trees docs/maintainers/verify.md names; and fix-authors/proofs.md's
    --coverage of one fix. The coverage extra's requirements are among the test extra's, so this one
    venv (torch's install is most of this test's minute and a half) stands for `[proofs,coverage]`."""
    assert {(r.name, r.specifier) for r in declared("coverage")} <= {(r.name, r.specifier) for r in declared("test")}
    bin_dir = _venv(tmp_path / "venv", "test,proofs")
    out = _verify(bin_dir)
    assert out["ok"] and len(out["results"]) >= 25
    assert {r["proof"] for r in out["results"]} <= {"demonstrated", "partial"}
    (result,) = _verify(bin_dir, "--coverage", "--fix", "request-body-object")["results"]
    assert result["proof"] == "demonstrated" and result["coverage"]["unrun"] == [] and result["coverage"]["total"] > 0
