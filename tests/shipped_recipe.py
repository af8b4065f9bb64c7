"""The shipped Qwen3.5-122B-A10B-FP8 recipe, as the recipe-start tests use it: its slug, rules and
serve arguments, a stand-in ``vllm`` that records how it was started, and a test cookbook that
carries the recipe.

Imported by the modules that test a recipe start only, not by conftest.py: the recipe is loaded
at import, and a recipe that does not load then fails those modules alone. For the same reason, and
because other modules' ``book`` fixtures are other cookbooks, each of those modules makes its own
``book`` fixture of ``with_recipe``.
"""

from __future__ import annotations

from builders import REPO, Cookbook
from cookbooks import three_fixes

from fixpack.cookbook.recipes import load_recipes

SLUG = "qwen3.5-122b-a10b-fp8-gaudi2"
NO_GDN = "qwen3.5-122b-a10b-fp8-gaudi2-no-gdn"
SHIPPED = REPO / "recipes" / "Qwen" / "Qwen3.5-122B-A10B-FP8" / "recipe.yaml"
RECIPE = load_recipes(REPO)[SLUG]
RULES = {r["id"]: r["message"].strip() for r in RECIPE.rules}
OPT_INS = "opt_ins: [gdn-prefix-cache, fp8-moe-gather]"

# Records how it was started, as vllm: its arguments and its environment.
STAND_IN = """#!{python}
import json, os, sys
with open({record!r}, "w") as fh:
    json.dump({{"argv": sys.argv[1:], "env": dict(os.environ)}}, fh)
"""


def with_recipe(cookbook: Cookbook) -> Cookbook:
    """The engine tests' cookbook, with an opt-in named gdn-prefix-cache, the shipped recipe (its
    rules, environment and serve arguments as the page's) over it, and a copy without the opt-in."""
    three_fixes(cookbook)
    cookbook.fix("gdn-prefix-cache", {"vllm_gaudi/gdn.py": (None, "GDN = 1\n")}, opt_in=True)
    cookbook.profile(["one", "two", "three", "gdn-prefix-cache"], opt_ins=["gdn-prefix-cache"])
    cookbook.lock()
    text = SHIPPED.read_text()
    assert OPT_INS in text
    folder = cookbook.root / "recipes" / "Qwen" / "Qwen3.5-122B-A10B-FP8"
    folder.mkdir(parents=True)
    (folder / "recipe.yaml").write_text(text.replace(OPT_INS, "opt_ins: [gdn-prefix-cache]"))
    (folder / "no-gdn.yaml").write_text(
        text.replace(OPT_INS, "opt_ins: []").replace(f"slug: {SLUG}\n", f"slug: {NO_GDN}\n")
    )
    return cookbook
