import textwrap

from builders import RUNNER
from click.testing import CliRunner

from fixpack.cli import main


def test_lock_renders_cst_then_apply(cookbook, site):
    d = cookbook.root / "fixes" / "cst-only"
    d.mkdir(parents=True)
    (d / "fix.toml").write_text(
        textwrap.dedent("""\
        id = "cst-only"
        title = "t"
        why = "w"
        [upstream]
        status = "pending"
        [proof]
        level = "none"
        reason = "test"
        [release."v0.26.0"]
        transforms = "v0.26.0_cst.py"
        """)
    )
    (d / "v0.26.0_cst.py").write_text(
        "from fixpack.transforms import Transform, replace_body\n"
        "TRANSFORMS = [Transform('vllm_gaudi/runner.py', [replace_body('f7', 'return 777')])]\n"
    )
    cookbook.profile(["cst-only"])
    args = [a for dist, root in cookbook.sources.items() for a in ("--source", f"{dist}={root}")]
    r = CliRunner().invoke(main, ["lock", "--profile", "v0.26.0", *args], catch_exceptions=False)
    assert r.exit_code == 0, r.output
    assert (d / "v0.26.0.rendered.patch").exists() and (d / "v0.26.0.lock.json").exists()
    r = CliRunner().invoke(main, ["apply", "--profile", "v0.26.0", "--site", str(site.path)], catch_exceptions=False)
    assert r.exit_code == 0, r.output
    assert site.read("vllm_gaudi/runner.py") == RUNNER.replace("return 7\n", "return 777\n").encode()
