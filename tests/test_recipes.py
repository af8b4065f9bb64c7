"""Recipes: the shipped recipe against its cookbook page (launch, fix table), ``fixpack recipe
check`` passing on it and failing (exit 1, or 2 for a file that is not a recipe) at the right line
for broken copies of it, the upstream cross-check, and vLLM's own argument parser."""

from __future__ import annotations

import json
import os
import re
import shlex
from pathlib import Path

import pytest

from fixpack.commands.recipes import recipe as recipe_commands
from fixpack.commands.recipes.vllm_parser import Probe, probe

REPO = Path(__file__).resolve().parent.parent
RECIPE_FILE = REPO / "recipes" / "Qwen" / "Qwen3.5-122B-A10B-FP8" / "recipe.yaml"
TEXT = RECIPE_FILE.read_text()
SLUG = "qwen3.5-122b-a10b-fp8-gaudi2"
WARNING = next(r["message"] for r in recipe_commands.load_recipes(REPO)[SLUG].rules if r["verdict"] == "warn")


def _shared() -> Path | None:
    """The page and vLLM's recipe: $FIXPACK_SHARED_RECIPES, or the shared/ folder beside the checkout."""
    named = os.environ.get("FIXPACK_SHARED_RECIPES")
    folder = Path(named) if named else REPO.parent / "shared" / "recipes"
    return folder if (folder / "cookbook-qwen3.5-122b-a10b-fp8-gaudi2.txt").is_file() else None


SHARED = _shared()
needs_shared = pytest.mark.skipif(
    SHARED is None, reason="the cookbook page is not here: set FIXPACK_SHARED_RECIPES to shared/recipes"
)


@pytest.fixture
def no_vllm(monkeypatch):
    """The checks without vLLM's parser (its own test below asks it): fast and the same everywhere."""
    monkeypatch.setattr(recipe_commands, "probe", lambda argvs: Probe(unavailable="not asked in this test"))


def launch_parts(script: str) -> tuple[list[tuple[str, str]], str, list[str]]:
    """(exports, the apply_all.py line, the vllm serve words) of a launch block."""
    lines = script.splitlines()
    exports = [tuple(shlex.split(line)[1].split("=", 1)) for line in lines if line.startswith("export ")]
    (apply,) = [line for line in lines if "fixes/apply_all.py" in line and not line.startswith("#")]
    start = next(i for i, line in enumerate(lines) if line.startswith("vllm serve "))
    serve = []
    for line in lines[start:]:
        serve.append(line.rstrip("\\").strip())
        if not line.endswith("\\"):
            break
    return exports, apply, shlex.split(" ".join(serve))


def page_fix_table(page: str) -> list[tuple[str, bool, str]]:
    body = page.split("Fix\tWhy this model needs it\n", 1)[1].split("\n\n", 1)[0]
    rows = []
    for line in body.splitlines():
        fix, why = line.split("\t", 1)
        name = re.fullmatch(r"`([^`]+)`( \(opt-in\))?", fix)
        assert name, line
        rows.append((name.group(1), bool(name.group(2)), why))
    return rows


@needs_shared
def test_the_launch_equals_the_pages_launch_block(cli, no_vllm):
    page = (SHARED / "cookbook-qwen3.5-122b-a10b-fp8-gaudi2.txt").read_text()
    want_exports, want_apply, want_serve = launch_parts(page)
    r = cli("recipe", "show", SLUG, "--launch")
    assert r.exit_code == 0, r.output
    exports, apply, serve = launch_parts(r.stdout)
    assert len(want_exports) == 26 and exports == want_exports
    assert (
        apply
        == want_apply
        == ('python3 "$COOKBOOK/fixes/apply_all.py" --profile v0.26.0 gdn-prefix-cache fp8-moe-gather || exit 1')
    )
    assert serve == want_serve
    assert serve[:3] == ["vllm", "serve", "Qwen/Qwen3.5-122B-A10B-FP8"]
    assert sum(1 for w in serve if w.startswith("--")) == 14
    data = json.loads(cli("recipe", "show", SLUG, "--launch", "--json").stdout)
    assert [(e["name"], e["value"]) for e in data["env"]] == want_exports
    assert ["vllm", "serve", *data["serve"]] == want_serve
    assert data["script"] == r.stdout


@needs_shared
def test_the_fix_table_equals_the_pages(cli):
    page = (SHARED / "cookbook-qwen3.5-122b-a10b-fp8-gaudi2.txt").read_text()
    want = page_fix_table(page)
    assert len(want) == 15 and [f for f, opt_in, _ in want if opt_in] == ["gdn-prefix-cache", "fp8-moe-gather"]
    rows = json.loads(cli("recipe", "show", SLUG, "--fixes", "--json").stdout)["fixes"]
    assert [(r["fix"], r["opt_in"], r["why"]) for r in rows] == want
    markdown = cli("recipe", "show", SLUG, "--fixes", "--markdown").stdout.splitlines()
    assert markdown[:2] == ["| Fix | Why this model needs it |", "|---|---|"]
    assert markdown[2:] == [f"| `{f}`{' (opt-in)' if o else ''} | {why} |" for f, o, why in want]
    text = cli("recipe", "show", SLUG, "--fixes").stdout.splitlines()
    assert [line.split()[0] for line in text] == [f for f, _, _ in want]
    assert [line.split()[0] for line in text if line.split()[1] == "opt-in"] == ["gdn-prefix-cache", "fp8-moe-gather"]


def test_list_and_show(cli):
    rows = json.loads(cli("recipe", "list", "--json").stdout)["recipes"]
    assert [(r["slug"], r["file"], r["opt_ins"]) for r in rows] == [
        (SLUG, "recipes/Qwen/Qwen3.5-122B-A10B-FP8/recipe.yaml", ["gdn-prefix-cache", "fp8-moe-gather"])
    ]
    data = json.loads(cli("recipe", "show", SLUG, "--json").stdout)
    assert data["layout"] == {"tensor_parallel": 4, "pipeline_parallel": 1, "data_parallel": 1, "expert_parallel": True}
    assert data["image"] == {
        "release": "v0.26.0",
        "commits": {"vllm-gaudi": "b059f9c", "vllm": "568afb3a"},
        "gaudi_sw": "1.24.1",
    }
    assert [r["verdict"] for r in data["rules"]] == ["refuse", "refuse", "refuse", "warn"]
    r = cli("recipe", "show", "qwen3.5-122b")
    assert r.exit_code == 2 and "unknown recipe 'qwen3.5-122b'" in r.stderr


def test_check_passes_for_the_shipped_recipe(cli, no_vllm):
    r = cli("recipe", "check")
    assert r.exit_code == 0, r.output
    assert f"ok    {SLUG}" in r.stdout and "1 passed, 0 failed" in r.stdout
    assert "upstream cross-check skipped" in r.stderr and "not parsed with vLLM's parser" in r.stderr


# --- broken copies of the recipe, in a cookbook of their own ------------------------------------


@pytest.fixture
def book(tmp_path, monkeypatch):
    """A cookbook with the real fixes and profiles and recipes written by the test."""
    root = tmp_path / "book"
    root.mkdir()
    for name in ("fixes", "profiles"):
        (root / name).symlink_to(REPO / name)
    monkeypatch.setenv("FIXPACK_COOKBOOK", str(root))

    def write(text: str, rel: str = "recipes/Qwen/Qwen3.5-122B-A10B-FP8/recipe.yaml") -> Path:
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        return path

    return write


def changed(old: str, new: str, text: str = TEXT) -> tuple[str, int]:
    """The recipe with ``old`` (found once) replaced, and the line it is on."""
    assert text.count(old) == 1, old
    return text.replace(old, new), text[: text.index(old)].count("\n") + 1


def failing(cli, line: int, *words: str, code: int = 1, args: tuple[str, ...] = ()) -> str:
    r = cli("recipe", "check", *args)
    assert r.exit_code == code, r.output
    where = f"recipes/Qwen/Qwen3.5-122B-A10B-FP8/recipe.yaml:{line}: "
    hit = [x for x in r.output.splitlines() if where in x]
    assert hit, f"{where!r} not in:\n{r.output}"
    assert all(w in hit[0] for w in words), hit[0]
    assert "Traceback" not in r.output
    return hit[0]


def test_a_missing_opt_in_fails_at_the_fix_that_needs_it(cli, book, no_vllm):
    text, _ = changed("opt_ins: [gdn-prefix-cache, fp8-moe-gather]", "opt_ins: [gdn-prefix-cache]")
    book(text)
    line = text[: text.index("- fix: fp8-moe-gather")].count("\n") + 1
    failing(cli, line, "'fp8-moe-gather'", "not in the plan", "name it in fixes.opt_ins")


def test_dropping_gdn_prefix_cache_breaks_the_recipes_own_rule(cli, book, no_vllm):
    text, _ = changed("opt_ins: [gdn-prefix-cache, fp8-moe-gather]", "opt_ins: [fp8-moe-gather]")
    book(text)
    line = text[: text.index("  - id: prefix-caching-needs-gdn-prefix-cache")].count("\n") + 1
    failing(cli, line, "breaks rule prefix-caching-needs-gdn-prefix-cache (refuse)")


def test_a_wrong_pin_fails_at_its_line(cli, book, no_vllm):
    text, line = changed("vllm: 568afb3a", "vllm: 568afb3b")
    book(text)
    failing(cli, line, "vllm @ 568afb3b is not among profile v0.26.0's accepted commits")


def test_an_unknown_fix_fails_at_its_line(cli, book, no_vllm):
    text, line = changed("- fix: rope-cpu-cache", "- fix: rope-cpu-cach")
    book(text)
    failing(cli, line, "unknown fix 'rope-cpu-cach'", "did you mean 'rope-cpu-cache'")


def test_an_opt_in_the_profile_does_not_allow_fails(cli, book, no_vllm):
    text, line = changed(
        "opt_ins: [gdn-prefix-cache, fp8-moe-gather]", "opt_ins: [gdn-prefix-cache, fp8-moe-gather, rope-cpu-cache]"
    )
    book(text)
    failing(cli, line, "'rope-cpu-cache' is not an opt-in of profile v0.26.0")


def test_a_rule_on_an_unknown_variable_fails_at_its_line(cli, book, no_vllm):
    text, line = changed('when: {env: PT_HPU_LAZY_MODE, equals: "1"}', 'when: {env: PT_HPU_LAZZY_MODE, equals: "1"}')
    book(text)
    failing(cli, line, "rule no-lazy-mode tests PT_HPU_LAZZY_MODE, which the recipe does not export")


def test_a_layout_that_disagrees_with_the_serve_arguments_fails(cli, book, no_vllm):
    text, line = changed("tensor_parallel: 4", "tensor_parallel: 8")
    book(text)
    failing(cli, line, "tensor_parallel is 8, the serve arguments give 4")


@pytest.mark.parametrize(
    "old, new, words",
    [
        ("  cards: 4\n", "  cards: 4\n   bad: [\n", ("not valid YAML",)),
        ("  cards: 4\n", "  cards: four\n", ("hardware.cards must be a positive integer",)),
        ("  cards: 4\n", "  cards: 4\n  gpus: 4\n", ("unknown key 'gpus' in hardware",)),
        ('value: "16384"', "value: 16384", ("the value of VLLM_DECODE_BLOCK_BUCKET_MAX must be a string",)),
        ("verdict: warn", "verdict: maybe", ("rule: 'verdict' must be one of refuse, warn",)),
        ("  cards: 4\n", "  cards: 4\n  cards: 8\n", ("key 'cards' is given twice",)),
    ],
)
def test_a_file_that_is_not_a_recipe_exits_2_at_its_line(cli, book, old, new, words):
    text, line = changed(old, new)
    book(text)
    if "gpus" in new or "cards: 8" in new or "bad" in new:
        line += 1
    r = cli("recipe", "check")
    assert r.exit_code == 2, r.output
    assert r.stderr.startswith(
        f"fixpack: error: invalid recipe recipes/Qwen/Qwen3.5-122B-A10B-FP8/recipe.yaml:{line}: "
    )
    assert all(w in r.stderr for w in words), r.stderr
    assert len(r.stderr.splitlines()) == 1 and "Traceback" not in r.output
    data = json.loads(cli("recipe", "check", "--json").stdout)
    assert (data["ok"], data["file"], data["line"]) == (False, "recipes/Qwen/Qwen3.5-122B-A10B-FP8/recipe.yaml", line)


@pytest.mark.parametrize(
    "old, new, words",
    [
        ("  slug: qwen", "  slgu: qwen", "unknown key 'slgu' in meta (did you mean 'slug'?)"),
        ("    tensor_parallel: 4\n", "    tensor_paralel: 4\n", "in hardware.layout (did you mean 'tensor_parallel'?)"),
        ("      why: stale device", "      wyh: stale device", "'wyh' in fixes.depends_on.1 (did you mean 'why'?)"),
        ("verdict: warn", "verdcit: warn", "unknown key 'verdcit' in rules.3 (did you mean 'verdict'?)"),
    ],
)
def test_a_misspelt_key_exits_2_naming_the_file_the_key_and_the_nearest_one(cli, book, site, old, new, words):
    text, line = changed(old, new)
    path = book(text)
    r = cli("recipe", "check")
    assert r.exit_code == 2, r.output
    assert r.stderr.startswith(
        f"fixpack: error: invalid recipe recipes/Qwen/Qwen3.5-122B-A10B-FP8/recipe.yaml:{line}: "
    ), r.stderr
    assert words in r.stderr and len(r.stderr.splitlines()) == 1 and "Traceback" not in r.output, r.stderr
    before = site.snapshot()
    r = cli("apply", "--recipe", SLUG, "--site", str(site.path))
    assert r.exit_code == 2 and words in r.stderr and len(r.stderr.splitlines()) == 1, r.output
    assert site.snapshot() == before and path.read_text() == text


def test_a_slug_used_twice_exits_2(cli, book):
    book(TEXT)
    book(TEXT, "recipes/Qwen/Qwen3.5-122B-A10B-FP8/tp8.yaml")
    r = cli("recipe", "list")
    line = TEXT[: TEXT.index("  slug:")].count("\n") + 1
    assert r.exit_code == 2
    assert (
        f"tp8.yaml:{line}: slug '{SLUG}' is already the slug of recipes/Qwen/Qwen3.5-122B-A10B-FP8/recipe.yaml"
        in r.stderr
    )


# --- against vLLM's own recipe -----------------------------------------------------------------


@needs_shared
def test_the_upstream_cross_check_passes(cli, no_vllm):
    r = cli("recipe", "check", "--upstream", str(SHARED))
    assert r.exit_code == 0, r.output
    assert "cross-check skipped" not in r.stderr


@needs_shared
def test_the_upstream_cross_check_fails_when_a_feature_arg_is_dropped(cli, book, no_vllm):
    text, _ = changed("    - --language-model-only\n", "")
    book(text)
    line = text[: text.index("  features: [tool_calling, reasoning, text_only]")].count("\n") + 1
    failing(
        cli,
        line,
        "upstream feature 'text_only' passes --language-model-only, not in serve.args",
        args=("--upstream", str(SHARED)),
    )
    text, _ = changed("    - --enable-expert-parallel\n", "")
    book(text)
    line = text[: text.index("  strategy: single_node_tep")].count("\n") + 1
    failing(cli, line, "strategy 'single_node_tep' passes --enable-expert-parallel", args=("--upstream", str(SHARED)))


@needs_shared
def test_the_upstream_cross_check_names_the_served_model(cli, book, no_vllm):
    text, line = changed("  model: Qwen/Qwen3.5-122B-A10B-FP8\n", "  model: Qwen/Qwen3.5-122B-A10B\n")
    book(text)
    failing(
        cli,
        line,
        "serves Qwen/Qwen3.5-122B-A10B, upstream variant 'fp8' is Qwen/Qwen3.5-122B-A10B-FP8",
        args=("--upstream", str(SHARED)),
    )


# --- vLLM's own argument parser ----------------------------------------------------------------


def test_the_serve_arguments_parse_with_vllms_own_parser(cli, book):
    bad, _ = changed("    - --language-model-only\n", "    - --language-model-only\n    - --no-such-option\n")
    bad, _ = changed("slug: qwen3.5-122b-a10b-fp8-gaudi2", "slug: broken", bad)
    bad, rule_line = changed("{arg: [--enable-expert-parallel, -ep]}", "{arg: [--enable-expert-paralel, -ep]}", bad)
    book(TEXT)
    book(bad, "recipes/Qwen/Qwen3.5-122B-A10B-FP8/broken.yaml")
    data = json.loads(cli("recipe", "check", "--json").stdout)
    if data["notes"][0].startswith("serve arguments not parsed"):
        pytest.skip(data["notes"][0])  # vLLM (or, in FIXPACK_SRC_VLLM's tree, its dependencies) is not here
    assert data["notes"][0].startswith("serve arguments parsed with vLLM") and data["notes"][0].endswith("own parser")
    good, broken = sorted(data["recipes"], key=lambda r: r["slug"] == "broken")
    assert good["ok"] and not good["problems"]
    args_line = bad[: bad.index("  args:")].count("\n") + 1
    warn_line = bad[: bad.index("  - id: moe-gather-ratio-needs-expert-parallel")].count("\n") + 1
    assert [(p["line"], p["message"]) for p in broken["problems"]] == [
        (
            args_line,
            "vLLM's parser refuses the serve arguments: vllm serve: error: unrecognized arguments: --no-such-option",
        ),
        (warn_line, "its own launch breaks rule moe-gather-ratio-needs-expert-parallel (warn): " + WARNING),
        (
            rule_line,
            "rule moe-gather-ratio-needs-expert-parallel tests --enable-expert-paralel, an option vLLM's parser does "
            "not know (did you mean '--enable-expert-parallel'?)",
        ),
    ]
    (parsed,) = probe([["Qwen/Qwen3.5-122B-A10B-FP8", *recipe_commands.load_recipes(REPO)[SLUG].argv[1:]]]).results
    assert parsed.ok
    assert parsed.values["model_tag"] == "Qwen/Qwen3.5-122B-A10B-FP8"
    assert (parsed.values["tensor_parallel_size"], parsed.values["enable_expert_parallel"]) == (4, True)
    assert parsed.values["language_model_only"] is True and parsed.values["max_model_len"] == 262144
