"""apply_all.py with a runtime requirement missing, wherever the apply first imports it: one line
naming the module and the pip line, exit 3, nothing written; one of fixpack's own modules missing is
a bug and says so with its traceback."""

from __future__ import annotations

import os
import subprocess
import sys
from importlib.metadata import packages_distributions

import pytest
from builders import REPO, Cookbook, make_site
from cookbooks import three_fixes
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from runs import SCRIPT
from shipped_recipe import SLUG, with_recipe

# Run apply_all.py with every import of MODULE (and its sub-modules) refused, as where it is not installed.
BLOCKED = """\
import runpy, sys
blocked = sys.argv[1]
class Refuse:
    def find_spec(self, name, path=None, target=None):
        if name == blocked or name.startswith(blocked + "."):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
sys.meta_path.insert(0, Refuse())
for name in [m for m in sys.modules if m == blocked or m.startswith(blocked + ".")]:
    del sys.modules[name]
sys.argv = sys.argv[2:]
runpy.run_path(sys.argv[0], run_name="__main__")
"""


def requirements() -> set[str]:
    """The import names of every runtime requirement that applies to this interpreter."""
    lines = (REPO / "requirements.txt").read_text().splitlines()
    reqs = [Requirement(ln.split("#")[0]) for ln in lines if ln.split("#")[0].strip()]
    modules: dict[str, set[str]] = {}
    for module, dists in packages_distributions().items():
        for dist in dists:
            modules.setdefault(canonicalize_name(dist), set()).add(module)
    wanted = [canonicalize_name(r.name) for r in reqs if r.marker is None or r.marker.evaluate()]
    return {m for name in wanted for m in modules.get(name, {name})}


def without(module: str, cookbook, site, *args: str, fix_set: tuple[str, ...] = ("--profile", "v0.26.0")):
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "FIXPACK_SITE")}
    env["FIXPACK_COOKBOOK"] = str(cookbook.root)
    cmd = [sys.executable, "-c", BLOCKED, module, str(SCRIPT), *fix_set, *args, "--site", str(site.path)]
    return subprocess.run(cmd, capture_output=True, text=True, env=env)


@pytest.fixture
def book(cookbook: Cookbook) -> Cookbook:
    return with_recipe(cookbook)


@pytest.mark.parametrize(
    "module, versions",
    [
        ("click", None),  # imported first, by the command line
        ("packaging", {"vllm": "0.26.0+local", "vllm-gaudi": "0.26.0"}),  # only to compare versions, late
        ("unidiff", None),  # when the catalog parses the fixes' patches
    ],
)
def test_a_missing_requirement_is_one_line_and_exit_3_with_nothing_written(cookbook, tmp_path, module, versions):
    if module not in requirements():
        pytest.skip(f"{module} is not in requirements.txt on this branch")
    site = make_site(tmp_path, versions=versions)
    three_fixes(cookbook)
    before = site.snapshot()
    r = without(module, cookbook, site)
    assert r.returncode == 3, r.stderr
    assert r.stdout == "" and r.stderr.count("\n") == 1 and "Traceback" not in r.stderr
    pip = f"{os.path.basename(sys.executable)} -m pip install -r {REPO / 'requirements.txt'}"
    assert r.stderr.startswith(f"fixpack: error: the Python module '{module}' is missing") and pip in r.stderr
    assert site.snapshot() == before and not (site.path / ".fixpack").exists()
    applied = without("no-such-module", cookbook, site)  # the same line with it: applied
    assert applied.returncode == 0 and "3 applied" in applied.stdout


def test_a_recipe_start_without_yaml_is_one_line_and_exit_3_with_nothing_written(book, site):
    if "yaml" not in requirements():
        pytest.skip("PyYAML is not in requirements.txt on this branch")
    before = site.snapshot()
    r = without("yaml", book, site, fix_set=("--recipe", SLUG))  # the recipe is read before any write
    assert r.returncode == 3 and r.stderr.count("\n") == 1, r.stderr
    assert r.stderr.startswith("fixpack: error: the Python module 'yaml' is missing")
    assert site.snapshot() == before and not (site.path / ".fixpack").exists()
    applied = without("no-such-module", book, site, fix_set=("--recipe", SLUG))
    assert applied.returncode == 0 and "4 applied" in applied.stdout, applied.stderr


def test_the_warm_path_needs_no_requirement(cookbook, site):
    three_fixes(cookbook)
    assert without("no-such-module", cookbook, site).returncode == 0
    for module in requirements():
        r = without(module, cookbook, site)
        assert r.returncode == 0 and "3 already applied" in r.stdout, (module, r.stderr)


def test_a_missing_module_of_fixpack_s_own_is_a_bug_with_its_traceback(cookbook, site):
    three_fixes(cookbook)
    before = site.snapshot()
    r = without("fixpack.core.plan", cookbook, site)
    assert r.returncode == 1 and "Traceback" in r.stderr and "fixpack.core.plan" in r.stderr
    assert "pip install" not in r.stderr and site.snapshot() == before
