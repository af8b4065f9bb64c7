import os
import subprocess
import sys
from pathlib import Path

from builders import PRISTINE, REPO, RUNNER
from click.testing import CliRunner
from cookbooks import cst_only

from fixpack.cli import main

BATCH = PRISTINE["vllm-gaudi"]["vllm_gaudi/batch.py"]


def test_lock_renders_cst_then_apply(cookbook, site):
    d = cst_only(cookbook)
    args = [a for dist, root in cookbook.sources.items() for a in ("--source", f"{dist}={root}")]
    r = CliRunner().invoke(main, ["lock", "--profile", "v0.26.0", *args], catch_exceptions=False)
    assert r.exit_code == 0, r.output
    assert (d / "v0.26.0.rendered.patch").exists() and (d / "v0.26.0.lock.json").exists()
    r = CliRunner().invoke(main, ["apply", "--profile", "v0.26.0", "--site", str(site.path)], catch_exceptions=False)
    assert r.exit_code == 0, r.output
    assert site.read("vllm_gaudi/runner.py") == RUNNER.replace("return 7\n", "return 777\n").encode()


def _cst_fix(cookbook, fix_id: str, transforms: str, patch: bool) -> Path:
    """A fix whose runner.py change is a transform and, with ``patch``, whose batch.py change is a diff."""
    d = cookbook.fix(fix_id, {"vllm_gaudi/batch.py": (BATCH, BATCH.replace("rows[b], self", "rows[b],  self"))})
    if not patch:
        (d / "v0.26.0.patch").unlink()
    toml = (d / "fix.toml").read_text()
    table = '[release."v0.26.0"]\n' + ('patch = "v0.26.0.patch"\n' if patch else "") + 'transforms = "v0.26.0_cst.py"\n'
    (d / "fix.toml").write_text(toml[: toml.index('[release."v0.26.0"]')] + table)
    (d / "v0.26.0_cst.py").write_text(transforms)
    return d


def test_a_transform_after_another_fix_of_its_file_renders_on_that_fix_and_mixes_with_a_diff(cookbook, site):
    # f3 first returns 30 (a diff); then the cst fix replaces that result: it must meet f3's new text,
    # as apply chains them, and its batch.py change stays a plain diff beside the transform.
    cookbook.fix("first", {"vllm_gaudi/runner.py": (RUNNER, RUNNER.replace("return 3\n", "return 30\n"))})
    d = _cst_fix(
        cookbook,
        "mixed",
        "from fixpack.transforms import Transform, replace_statement\n"
        "TRANSFORMS = [Transform('vllm_gaudi/runner.py', [replace_statement('f3', 'return 30', 'return 300')])]\n",
        patch=True,
    )
    cookbook.profile(["first", "mixed"])
    args = [a for dist, root in cookbook.sources.items() for a in ("--source", f"{dist}={root}")]
    r = CliRunner().invoke(main, ["lock", "--profile", "v0.26.0", *args], catch_exceptions=False)
    assert r.exit_code == 0, r.output
    rendered = (d / "v0.26.0.rendered.patch").read_text()
    assert "-    return 30\n+    return 300\n" in rendered and "\nindex " in rendered
    from fixpack.cookbook.catalog import Catalog

    paths = [c.path for c in Catalog.load(cookbook.root).fixes["mixed"].changes["v0.26.0"]]
    assert paths == ["vllm_gaudi/batch.py", "vllm_gaudi/runner.py"]  # git's order across both files
    r = CliRunner().invoke(main, ["apply", "--profile", "v0.26.0", "--site", str(site.path)], catch_exceptions=False)
    assert r.exit_code == 0, r.output
    assert site.read("vllm_gaudi/runner.py") == RUNNER.replace("return 3\n", "return 300\n").encode()
    assert b"rows[b],  self" in site.read("vllm_gaudi/batch.py")


def test_a_file_both_a_transform_and_a_diff_is_refused(cookbook):
    d = _cst_fix(
        cookbook,
        "twice",
        "from fixpack.transforms import Transform, replace_expr\n"
        "TRANSFORMS = [Transform('vllm_gaudi/batch.py', [replace_expr('Batch.swap', 'a', 'b')])]\n",
        patch=True,
    )
    (d / "v0.26.0.rendered.patch").write_text((d / "v0.26.0.patch").read_text())
    cookbook.profile(["twice"])
    r = CliRunner().invoke(main, ["list", "--profile", "v0.26.0"], catch_exceptions=False)
    assert r.exit_code == 2 and "a file is a transform or a diff, not both" in r.output


def test_without_libcst_a_transform_s_lock_is_one_line_naming_the_authoring_extra(cookbook):
    """Issue 57's sibling: a module of an extra missing where a command first imports it was a
    traceback; it is the extra's install line, exit 3."""
    d = cst_only(cookbook)
    args = [a for dist, root in cookbook.sources.items() for a in ("--source", f"{dist}={root}")]
    blocked = "import sys; sys.modules['libcst'] = None; from fixpack.cli import main; sys.argv[0] = 'fixpack'; main()"
    r = subprocess.run(
        [sys.executable, "-c", blocked, "lock", "--profile", "v0.26.0", *args],
        capture_output=True,
        text=True,
        cwd=REPO,
        env={**os.environ, "FIXPACK_COOKBOOK": str(cookbook.root)},
    )
    assert r.returncode == 3 and "Traceback" not in r.stderr, r.stderr
    assert r.stderr.splitlines() == [
        "fixpack: error: the Python module 'libcst' is missing: this command needs fixpack's authoring extra, "
        f"{Path(sys.executable).name} -m pip install -e '{REPO}[authoring]'"
    ]
    assert not (d / "v0.26.0.lock.json").exists()
