"""Issue 56: the cookbook is trusted, but its reader still answers bad input in one line (exit 2):
an [instead] cycle, two pins of one distribution, commits that are not commit ids, a patch or a lock
that is a FIFO (never read, so nothing hangs), a TOML file, a lock or a recipe nested thousands
deep. Each line says the way on (issue 57): the format's section to correct the file by and the
command that reads it again, or for a lock the command that rewrites it."""

from __future__ import annotations

import json
import os
import re

import pytest
from builders import RUNNER, SAMPLER, run_cli
from runs import NEXT_STEP

FIX_PAGE = "docs/reference/formats.md#a-fix-fixesid"
PROFILE_PAGE = "docs/reference/formats.md#a-profile-profilesnametoml"
LOCK_PAGE = "docs/reference/formats.md#the-lock-file"
RECIPE_PAGE = "docs/reference/formats.md#a-recipe-recipesorgmodelyaml"


def _profiles(cookbook) -> None:
    cookbook.fix("sampler-fix", {"vllm/sampler.py": (SAMPLER, SAMPLER.replace("return x", "return x * 2"))})
    cookbook.fix("runner-fix", {"vllm_gaudi/runner.py": (RUNNER, RUNNER.replace("return 3\n", "return 33\n"))})
    cookbook.profile(["sampler-fix", "runner-fix"])


def one_line_exit_2(said: str, page: str = PROFILE_PAGE, *args: str) -> None:
    """``fixpack ARGS`` (default: profiles) fails in one line saying ``said``, then the way on: the
    format's ``page`` to correct the file by (a lock: the command that rewrites it), or ``page``
    itself where it is not one of the format's sections."""
    r = run_cli(*(args or ("profiles",)), timeout=60)
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and said in r.stderr, r.stderr
    assert "Traceback" not in r.stderr
    after = r.stderr[r.stderr.index(said) :]
    way = {
        LOCK_PAGE: "To go on: fixpack lock --profile NAME --source DIST=DIR rewrites the fingerprints from the "
        f"pinned trees ({LOCK_PAGE})",
        FIX_PAGE: f"To go on: correct it as {FIX_PAGE} says; fixpack list reads the cookbook again",
        PROFILE_PAGE: f"To go on: correct it as {PROFILE_PAGE} says; fixpack list reads the cookbook again",
    }.get(page, page)
    assert NEXT_STEP.search(after) and way in after, r.stderr


def test_an_instead_cycle_is_refused(cookbook):
    _profiles(cookbook)
    cookbook.profile(["sampler-fix"], name="vllm-0.26.0", dists=("vllm",), instead={"vllm-gaudi": "v0.26.0"})
    cookbook.profile(["sampler-fix", "runner-fix"], instead={"vllm": "vllm-0.26.0"})
    one_line_exit_2("[instead] leads back to")


def test_two_pins_of_one_distribution_are_refused(cookbook):
    _profiles(cookbook)
    path = cookbook.root / "profiles" / "v0.26.0.toml"
    text = path.read_text()
    path.write_text(text + text[text.index('\n[[pin]]\ndist = "vllm"') :])
    one_line_exit_2("two [[pin]] tables have dist 'vllm'")


@pytest.mark.parametrize("commit", ["zz", "", "abc", "g" * 40, "a" * 41])
def test_a_commit_that_is_not_a_commit_id_is_refused(cookbook, commit):
    _profiles(cookbook)
    path = cookbook.root / "profiles" / "v0.26.0.toml"
    path.write_text(re.sub(r"commits = \[[^\]]*\]", f'commits = ["{commit}"]', path.read_text(), count=1))
    one_line_exit_2(f"commit {commit!r} is not a git commit id")


def test_a_patch_that_is_a_fifo_is_refused_without_hanging(cookbook):
    _profiles(cookbook)
    (patch,) = (cookbook.root / "fixes" / "sampler-fix").glob("*.patch")
    patch.unlink()
    os.mkfifo(patch)
    one_line_exit_2("is not a regular file", FIX_PAGE)


def test_a_toml_file_nested_thousands_deep_is_one_line(cookbook):
    _profiles(cookbook)
    toml = cookbook.root / "fixes" / "runner-fix" / "fix.toml"
    toml.write_text(toml.read_text() + "deep = " + "[" * 5000 + "]" * 5000 + "\n")
    one_line_exit_2("nested too deep", FIX_PAGE)


def test_a_lock_that_is_a_fifo_is_refused_without_hanging(cookbook):
    _profiles(cookbook)
    cookbook.lock()
    lock = cookbook.root / "fixes" / "sampler-fix" / "v0.26.0.lock.json"
    lock.unlink()
    os.mkfifo(lock)
    one_line_exit_2("is not a regular file", LOCK_PAGE)


def test_a_lock_nested_thousands_deep_is_one_line(cookbook):
    _profiles(cookbook)
    cookbook.lock()
    lock = cookbook.root / "fixes" / "sampler-fix" / "v0.26.0.lock.json"
    lock.write_text('{"files": ' + "[" * 100_000 + "]" * 100_000 + "}")
    one_line_exit_2("nested too deep", LOCK_PAGE)


@pytest.mark.parametrize("deep", ["[" * 3000 + "]" * 3000, "{a: " * 3000 + "1" + "}" * 3000])
def test_a_recipe_nested_thousands_deep_is_one_line(cookbook, deep):
    from shipped_recipe import with_recipe

    with_recipe(cookbook)
    recipe = cookbook.root / "recipes" / "Qwen" / "Qwen3.5-122B-A10B-FP8" / "recipe.yaml"
    recipe.write_text(recipe.read_text() + "deep: " + deep + "\n")
    r = run_cli("recipe", "check", timeout=60)
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
    assert r.stderr.count("\n") == 1 and "recipe.yaml:1: nested too deep or too large to read" in r.stderr
    assert f"To go on: correct it as {RECIPE_PAGE} says; fixpack recipe check reads every recipe again" in r.stderr


def test_upstreams_yaml_nested_thousands_deep_is_one_line(tmp_path):
    """The other YAML fixpack reads: vLLM's recipe for --upstream, upstream's pre-commit config."""
    from fixpack.commands.maintain.proving.style import hooks
    from fixpack.commands.recipes.recipe_upstream import _load
    from fixpack.errors import UsageError

    deep = "repos: " + "[" * 3000 + "]" * 3000 + "\n"
    (tmp_path / ".pre-commit-config.yaml").write_text(deep)
    (tmp_path / "recipe.yaml").write_text(deep)
    for read in (lambda: hooks(tmp_path), lambda: _load(tmp_path / "recipe.yaml")):
        with pytest.raises(UsageError, match="nested too deep or too large"):
            read()


def _edit(path, old: str, new: str) -> None:
    text = path.read_text()
    assert old in text, text
    path.write_text(text.replace(old, new, 1))


# Each file of the cookbook, made invalid: what the line says, and the page it names to correct it.
INVALID = {
    "fix.toml not TOML": (lambda fixes, profiles: (fixes / "runner-fix" / "fix.toml").write_text("id = \n"), FIX_PAGE),
    "an unknown proof level": (
        lambda fixes, profiles: _edit(fixes / "runner-fix" / "fix.toml", 'level = "none"', 'level = "some"'),
        FIX_PAGE,
    ),
    "a patch without a file": (
        lambda fixes, profiles: (fixes / "runner-fix" / "v0.26.0.patch").write_text("x\n"),
        "see what changed it (git status, git diff in the cookbook), or write it again (fixpack record",
    ),
    "a pack naming an unknown fix": (
        lambda fixes, profiles: _edit(profiles / "v0.26.0.toml", '"runner-fix"', '"runer-fix"'),
        PROFILE_PAGE,
    ),
    "a lock of no digests": (
        lambda fixes, profiles: (fixes / "runner-fix" / "v0.26.0.lock.json").write_text('{"files": {"a": 1}}'),
        LOCK_PAGE,
    ),
}


@pytest.mark.parametrize("case", INVALID)
@pytest.mark.parametrize(
    "command", [("list",), ("apply", "--profile", "v0.26.0"), ("status",), ("show", "sampler-fix")]
)
def test_an_invalid_cookbook_file_is_one_line_naming_its_format_s_section(cookbook, site, case, command):
    _profiles(cookbook)
    cookbook.lock()
    spoil, page = INVALID[case]
    spoil(cookbook.root / "fixes", cookbook.root / "profiles")
    where = ("--site", str(site.path)) if command[0] in ("apply", "status") else ()
    before = site.snapshot()
    one_line_exit_2("invalid ", page, *command, *where)
    assert site.snapshot() == before


def test_an_invalid_cookbook_file_s_way_out_is_in_the_json_error_too(cookbook, site):
    _profiles(cookbook)
    _edit(cookbook.root / "fixes" / "runner-fix" / "fix.toml", 'level = "none"', 'level = "some"')
    r = run_cli("apply", "--profile", "v0.26.0", "--site", str(site.path), "--json", timeout=60)
    assert r.returncode == 2 and f"To go on: correct it as {FIX_PAGE} says" in json.loads(r.stdout)["error"]


def test_the_refusals_page_shows_what_an_invalid_fix_toml_prints(cookbook, site):
    from builders import REPO

    _profiles(cookbook)
    _edit(cookbook.root / "fixes" / "runner-fix" / "fix.toml", 'level = "none"', 'level = "some"')
    r = run_cli("apply", "--profile", "v0.26.0", "--site", str(site.path), timeout=60)
    printed = r.stderr.strip().replace(str(cookbook.root), "COOKBOOK")
    page = (REPO / "docs" / "operators" / "when-it-refuses.md").read_text()
    assert f"```text\n{printed}\n```" in page, printed
