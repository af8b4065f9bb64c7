"""The package's layers, read from its imports: the core imports nothing outside the core (and
the models and errors), click only in the CLI, the cookbook and the site never reach up into the
commands or the CLI, and no import cycle anywhere."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "fixpack"

# module prefix -> the fixpack modules it may import (besides itself and its own sub-modules)
ALLOWED = {
    # fixpack.runtime.fixset: a fix set's canonical form, which the runtime check recomputes
    "fixpack.core": {"fixpack.core", "fixpack.models", "fixpack.errors", "fixpack.runtime.fixset"},
    "fixpack.models": set(),
    "fixpack.errors": set(),
    "fixpack.extras": {"fixpack.cookbook.tomlfile"},  # pyproject.toml's extras, where fixpack is not installed
    "fixpack.transforms": {"fixpack.core"},
    # fixpack.runtime.rules: the recipes' rule evaluator, and fixpack.runtime.fixset: when a digest may
    # be reported; stdlib-only leaves the runtime check carries
    # and fixpack.runtime.index: its reader of regular files of bounded size
    "fixpack.cookbook": {
        "fixpack.core",
        "fixpack.models",
        "fixpack.errors",
        "fixpack.runtime.rules",
        "fixpack.runtime.index",
    },
    # fixpack.runtime.index: the runtime index's one reader and writer, which the plugin writes
    "fixpack.installation": {"fixpack.core", "fixpack.models", "fixpack.errors", "fixpack.runtime.index"},
    # commands/ in three wings, one per audience: install (what a container start and an operator
    # run on a site) is the base the other two may build on; maintain (a maintainer's, by job:
    # authoring, proving, porting, upstream, over history, trees and build-site) and recipes never
    # import each other.
    "fixpack.commands.install": {
        "fixpack.core",
        "fixpack.models",
        "fixpack.errors",
        "fixpack.cookbook",
        "fixpack.installation",
        "fixpack.runtime.fixset",
        "fixpack.runtime.check",  # what every process would refuse, which status reports
    },
    "fixpack.commands.maintain": {
        "fixpack",
        "fixpack.core",
        "fixpack.models",
        "fixpack.errors",
        "fixpack.cookbook",
        "fixpack.installation",
        "fixpack.transforms",
        "fixpack.proofkit",
        "fixpack.proofrun",
        "fixpack.commands.install",
    },
    "fixpack.commands.recipes": {
        "fixpack.extras",  # recipe accept's extra, named in its refusal
        "fixpack.core",
        "fixpack.models",
        "fixpack.errors",
        "fixpack.cookbook",
        "fixpack.installation",
        "fixpack.runtime.rules",
        "fixpack.commands.install",
    },
    # provenance (sbom: what an image build runs after the apply, to inventory it) reads the install
    # wing's status and the maintain wing's diff: above both, and nothing imports it
    "fixpack.commands.provenance": {
        "fixpack",
        "fixpack.core",
        "fixpack.models",
        "fixpack.errors",
        "fixpack.cookbook",
        "fixpack.installation",
        "fixpack.commands.install",
        "fixpack.commands.maintain",
    },
    "fixpack.commands": set(),  # the package itself: its wings only
    "fixpack.cli": {"fixpack", "fixpack.commands", "fixpack.cookbook", "fixpack.errors", "fixpack.models"},
    "fixpack.proofkit": set(),
    "fixpack.proofrun": {"fixpack.proofkit"},
    "fixpack.runtime": set(),  # runs inside vLLM processes, copied out of fixpack: the standard library only
    "fixpack.__main__": {"fixpack.cli", "fixpack.errors"},  # Ctrl-C while the CLI imports: the contract's line
    "fixpack": set(),
}
# the warm path runs before anything else is imported: the standard library and these only
WARM_PATH = {
    "fixpack.installation.warm",
    "fixpack.installation.layout",
    "fixpack.core.fingerprint",
    "fixpack.runtime.index",
}


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _imports(path: Path) -> set[str]:
    """Every module this file imports, relative imports resolved (at any depth in the file)."""
    name = _module_name(path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    out = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            out.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - (node.level - 1)]
                stem = ".".join(base + ([node.module] if node.module else []))
            else:
                stem = node.module or ""
            # ``from . import x`` imports the sub-module x when there is one, not the package's names
            subs = {f"{stem}.{alias.name}" for alias in node.names if _exists(f"{stem}.{alias.name}")}
            out |= subs
            if len(subs) < len(node.names):
                out.add(stem)
    return out


def _exists(module: str) -> bool:
    rel = Path(*module.split("."))
    return (PACKAGE.parent / rel).with_suffix(".py").is_file() or (PACKAGE.parent / rel / "__init__.py").is_file()


GRAPH = {_module_name(p): _imports(p) for p in sorted(PACKAGE.rglob("*.py"))}


def _layer(module: str) -> str:
    return max((prefix for prefix in ALLOWED if module == prefix or module.startswith(prefix + ".")), key=len)


@pytest.mark.parametrize("module", sorted(GRAPH))
def test_each_module_imports_only_from_the_layers_below(module):
    layer = _layer(module)
    allowed = ALLOWED[layer] | {layer}
    wrong = sorted(
        imp
        for imp in GRAPH[module]
        if imp.startswith("fixpack")
        and not any(imp == a or imp.startswith(a + ".") for a in allowed)
        and imp != "fixpack"
        or (imp == "fixpack" and "fixpack" not in allowed and layer != "fixpack")
    )
    assert not wrong, f"{module} ({layer}) imports {wrong}"


@pytest.mark.parametrize("module", sorted(GRAPH))
def test_click_only_in_the_cli(module):
    if _layer(module) != "fixpack.cli":
        assert "click" not in {imp.split(".")[0] for imp in GRAPH[module]}, f"{module} imports click"


def test_the_warm_path_imports_the_standard_library_and_itself_only():
    for module in WARM_PATH:
        inside = {imp for imp in GRAPH[module] if imp.startswith("fixpack")}
        outside = inside - WARM_PATH - {"fixpack", "fixpack.core", "fixpack.installation"}
        assert not outside, f"{module} imports {outside}"
        assert not {imp.split(".")[0] for imp in GRAPH[module]} & {"click", "unidiff", "packaging", "libcst"}


def test_no_import_cycle():
    modules = {m: {i for i in imps if i in GRAPH and i != m} for m, imps in GRAPH.items()}
    # A package's __init__ is imported by its sub-modules implicitly; only explicit edges count.
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(m: str) -> None:
        state[m] = 1
        stack.append(m)
        for n in sorted(modules[m]):
            if state.get(n) == 1:
                cycle = stack[stack.index(n) :] + [n]
                raise AssertionError("import cycle: " + " -> ".join(cycle))
            if n not in state:
                visit(n)
        stack.pop()
        state[m] = 2

    for m in sorted(modules):
        if m not in state:
            visit(m)


def test_no_module_is_longer_than_about_400_lines():
    long = {_module_name(p): n for p in PACKAGE.rglob("*.py") if (n := len(p.read_text().splitlines())) > 420}
    assert not long, long


def test_git_runs_in_one_module():
    # a command line that starts with "git": only the maintain wing's history module builds one
    runs = set()
    for path in PACKAGE.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.List) and node.elts and isinstance(first := node.elts[0], ast.Constant):
                if first.value == "git":
                    runs.add(_module_name(path))
    assert runs == {"fixpack.commands.maintain.history"}


def test_the_runtime_index_has_one_reader_and_writer():
    # its name is written once, in its owner; every other module reaches it through that module
    named = set()
    for path in PACKAGE.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Constant) and node.value == "index.json":
                named.add(_module_name(path))
    assert named == {"fixpack.runtime.index"}
    users = {m for m, imports in GRAPH.items() if "fixpack.runtime.index" in imports}
    # the overlay's hook loads it by its path, not by import (tests/test_runtime.py runs that path)
    # the warm path reads the manifest with its regular-file reader and its rule on who may write
    assert users == {
        "fixpack.runtime.check",
        "fixpack.runtime.agree",
        "fixpack.runtime.fixset",
        "fixpack.installation.plugin",
        "fixpack.installation.warm",
        "fixpack.installation.state",  # the state files' reader: regular files only, bounded; the rule on who may write
        "fixpack.installation.manifest",  # and their JSON object of one format
        "fixpack.installation.journal",  # the journal's index and backups
        "fixpack.cookbook.tomlfile",  # and the cookbook's
        "fixpack.cookbook.fix_module",
        "fixpack.cookbook.lockfile",
        "fixpack.cookbook.recipes",
        "fixpack.commands.provenance.sbom",  # and --merge's input
    }


# The modules that parse or render a format fixpack keeps on disk (or reads of pip's), each the one
# reader and writer of its format; a format's bytes are opened elsewhere only to be handed to it.
FORMATS = {
    "fixpack.installation.manifest": "the manifest, .fixpack/manifest.json",
    "fixpack.installation.journal": "a transaction's journal, journal.json",
    # the warm path runs before anything else is imported: it reads the manifest's stamp itself
    "fixpack.installation.warm": "the warm stamp, in the manifest",
    "fixpack.installation.pip_record": "pip's RECORD (csv), which importlib.metadata reads",
    "fixpack.installation.commits": "pip's direct_url.json (PEP 610)",
    "fixpack.runtime.index": "the runtime index, fixpack_runtime_check/index.json",
    "fixpack.runtime.agree": "no file: each rank's record in torch's store",
    "fixpack.runtime.fixset": "no file: a fix set's identity, hashed (fixpack.core.identity's canonical form)",
}


def test_each_format_has_one_reader_and_writer():
    calls = ("json.loads", "json.dumps", "json.load", "json.dump", "csv.reader", "csv.writer")
    found = set()
    for path in PACKAGE.rglob("*.py"):
        module = _module_name(path)
        if module.startswith(("fixpack.installation", "fixpack.runtime", "fixpack.core", "fixpack.commands.install")):
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
                    if f"{node.value.id}.{node.attr}" in calls:
                        found.add(module)
    assert found == set(FORMATS)
