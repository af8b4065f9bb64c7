"""The rules of a recipe as data: the pure evaluator of fixpack/runtime/rules.py on the shipped
recipe's own rules (the page's "What not to do"), the argument forms vLLM reads, and the
vocabulary's validation."""

from __future__ import annotations

import ast
import json
import sys
from pathlib import Path

import pytest

from fixpack.cookbook.recipes import load_recipe
from fixpack.runtime import rules
from fixpack.runtime.rules import RuleError, evaluate, options, uses_args, validate

REPO = Path(__file__).resolve().parent.parent
RECIPE = load_recipe(REPO / "recipes" / "Qwen" / "Qwen3.5-122B-A10B-FP8" / "recipe.yaml", REPO)
PLAN = {"hybrid-decode-pad", "gdn-prefix-cache", "fp8-moe-gather", "prompt-order"}


def verdicts(env=None, args=None, fixes=PLAN, extra_env=(), drop_args=()):
    """Findings on the recipe's launch, changed as asked: {rule id: verdict}."""
    env = dict(RECIPE.env if env is None else env)
    env.update(extra_env)
    argv = [a for a in (RECIPE.argv[1:] if args is None else args) if a not in drop_args]
    return {f.rule: f.verdict for f in evaluate(RECIPE.rules, env, argv, fixes)}


def test_the_recipes_own_launch_breaks_none_of_its_rules():
    assert verdicts() == {}


@pytest.mark.parametrize("value", ["1", " 1 "])
def test_lazy_mode_is_refused(value):
    assert verdicts(extra_env={"PT_HPU_LAZY_MODE": value}) == {"no-lazy-mode": "refuse"}


def test_eager_mode_and_the_unset_default_are_allowed():
    assert verdicts(extra_env={"PT_HPU_LAZY_MODE": "0"}) == {}
    env = {k: v for k, v in RECIPE.env if k != "PT_HPU_LAZY_MODE"}
    assert verdicts(env=env) == {}


def test_prefix_caching_without_gdn_prefix_cache_is_refused():
    assert verdicts(fixes=PLAN - {"gdn-prefix-cache"}) == {"prefix-caching-needs-gdn-prefix-cache": "refuse"}
    # without prefix caching the plan may leave the opt-in out
    assert verdicts(fixes=PLAN - {"gdn-prefix-cache"}, drop_args={"--enable-prefix-caching"}) == {}


@pytest.mark.parametrize("form", [["--enable-prefix-caching"], ["--enable_prefix_caching"]])
def test_prefix_caching_is_seen_in_each_spelling(form):
    args = [a for a in RECIPE.argv[1:] if a != "--enable-prefix-caching"] + form
    assert "prefix-caching-needs-gdn-prefix-cache" in verdicts(args=args, fixes=PLAN - {"gdn-prefix-cache"})


def test_the_last_of_enable_and_no_enable_wins():
    args = [*RECIPE.argv[1:], "--no-enable-prefix-caching"]
    assert verdicts(args=args, fixes=PLAN - {"gdn-prefix-cache"}) == {}
    args = [*args, "--enable-prefix-caching"]
    assert verdicts(args=args, fixes=PLAN - {"gdn-prefix-cache"}) == {"prefix-caching-needs-gdn-prefix-cache": "refuse"}


@pytest.mark.parametrize("value", ["0", "false", " FALSE", "no"])
def test_compact_gdn_off_with_prefix_caching_and_gdn_prefix_cache_is_refused(value):
    assert verdicts(extra_env={"VLLM_COMPACT_GDN": value}) == {"gdn-prefix-cache-needs-compact-gdn": "refuse"}


@pytest.mark.parametrize("value", ["1", "true", "True "])
def test_compact_gdn_on_is_allowed(value):
    assert verdicts(extra_env={"VLLM_COMPACT_GDN": value}) == {}


def test_compact_gdn_off_is_allowed_without_prefix_caching():
    assert verdicts(extra_env={"VLLM_COMPACT_GDN": "0"}, drop_args={"--enable-prefix-caching"}) == {}
    # unset: vllm-gaudi turns compact slots on for a GDN model
    assert verdicts(env={k: v for k, v in RECIPE.env if k != "VLLM_COMPACT_GDN"}) == {}


def test_the_gather_ratio_without_expert_parallelism_is_warned_not_refused():
    assert verdicts(drop_args={"--enable-expert-parallel"}) == {"moe-gather-ratio-needs-expert-parallel": "warn"}
    args = [a for a in RECIPE.argv[1:] if a != "--enable-expert-parallel"]
    assert verdicts(args=[*args, "-ep"]) == {}  # vLLM's short spelling
    assert verdicts(args=[*RECIPE.argv[1:], "--no-enable-expert-parallel"]) == {
        "moe-gather-ratio-needs-expert-parallel": "warn"
    }
    env = {k: v for k, v in RECIPE.env if k != "VLLM_HPU_MOE_GATHER_RATIO"}
    assert verdicts(env=env, drop_args={"--enable-expert-parallel"}) == {}


def test_a_finding_carries_the_rules_one_line():
    (finding,) = evaluate(RECIPE.rules, {"PT_HPU_LAZY_MODE": "1"}, None, ())
    rule = next(r for r in RECIPE.rules if r["id"] == "no-lazy-mode")
    assert (finding.rule, finding.verdict, finding.message) == ("no-lazy-mode", "refuse", rule["message"])
    assert "\n" not in finding.message


def test_without_a_command_line_only_the_rules_on_env_and_plan_are_evaluated():
    env = {"PT_HPU_LAZY_MODE": "1", "VLLM_COMPACT_GDN": "0", "VLLM_HPU_MOE_GATHER_RATIO": "1.0"}
    assert [f.rule for f in evaluate(RECIPE.rules, env, None, set())] == ["no-lazy-mode"]
    assert [r["id"] for r in RECIPE.rules if not uses_args(r["when"])] == ["no-lazy-mode"]


def test_rules_are_json_and_evaluate_the_same_after_a_round_trip():
    again = json.loads(json.dumps(RECIPE.rules))
    env = {"PT_HPU_LAZY_MODE": "1", "VLLM_HPU_MOE_GATHER_RATIO": "2"}
    assert evaluate(again, env, ["m"], set()) == evaluate(RECIPE.rules, env, ["m"], set())


def test_options_read_vllms_argument_forms():
    argv = ["model", "--tp=4", "--max_model_len", "1024", "--x", "-1", "--flag", "--gpu-memory-utilization=0.9", "-ep"]
    assert options(argv) == [
        ("--tp", "4"),
        ("--max-model-len", "1024"),
        ("--x", "-1"),
        ("--flag", None),
        ("--gpu-memory-utilization", "0.9"),
        ("-ep", None),
    ]


def test_arg_values_compare_as_the_last_one_given():
    rule = {"id": "r", "verdict": "warn", "message": "m", "when": {"arg": "--block-size", "equals": "128"}}
    assert evaluate([rule], {}, ["m", "--block-size", "64", "--block-size=128"], ()) != []
    assert evaluate([rule], {}, ["m", "--block-size=128", "--block-size", "64"], ()) == []
    assert evaluate([rule], {}, ["m"], ()) == []


@pytest.mark.parametrize(
    "rule, where",
    [
        ({"id": "r", "verdict": "stop", "message": "m", "when": {"fix": "f"}}, ("verdict",)),
        ({"id": "r", "verdict": "warn", "message": "m", "when": {"env": "A", "is": "1"}}, ("when", "is")),
        ({"id": "r", "verdict": "warn", "message": "m", "when": {"env": "A", "equals": 1}}, ("when", "equals")),
        (
            {"id": "r", "verdict": "warn", "message": "m", "when": {"all": [{"arg": "enable"}]}},
            ("when", "all", 0, "arg"),
        ),
        ({"id": "r", "verdict": "warn", "message": "m", "when": {"env": "A", "fix": "f"}}, ("when",)),
        ({"id": "r", "verdict": "warn", "message": "a\nb", "when": {"fix": "f"}}, ("message",)),
        ({"id": "r", "verdict": "warn", "message": "m", "when": {"any": []}}, ("when", "any")),
        ({"id": "r", "verdict": "warn", "message": "m", "if": {"fix": "f"}}, ("if",)),
    ],
)
def test_a_rule_outside_the_vocabulary_is_refused_with_where(rule, where):
    with pytest.raises(RuleError) as caught:
        validate(rule)
    assert caught.value.where == where


def test_the_rules_module_is_standard_library_only():
    tree = ast.parse(Path(rules.__file__).read_text())
    imported = {a.name.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    imported |= {n.module.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.level == 0}
    assert imported <= set(sys.stdlib_module_names) | {"__future__"}, imported
    assert not any(isinstance(n, ast.ImportFrom) and n.level for n in ast.walk(tree))
