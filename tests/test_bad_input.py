"""Bad input, one case a row: a one-line error with the contract's exit code, never a traceback,
and nothing changed."""

from __future__ import annotations

import importlib.util
import json
from collections.abc import Callable
from pathlib import Path

import pytest
from builders import GAUDI_COMMIT, RUNNER, SAMPLER, make_site
from runs import NEXT_STEP


def _pack(cookbook) -> None:
    cookbook.fix("sampler-fix", {"vllm/sampler.py": (SAMPLER, SAMPLER.replace("return x", "return x * 2"))})
    cookbook.fix("runner-fix", {"vllm_gaudi/runner.py": (RUNNER, RUNNER.replace("return 3\n", "return 33\n"))})
    cookbook.profile(["sampler-fix", "runner-fix"])
    cookbook.lock()


def _dist_info(site, name: str) -> Path:
    (found,) = site.path.glob(f"{name}-*.dist-info")
    return found


def _metadata(content: bytes) -> Callable:
    def setup(cookbook, site, monkeypatch):
        (_dist_info(site, "vllm_gaudi") / "METADATA").write_bytes(content)
        return ["apply", "--profile", "v0.26.0", "--site", str(site.path)]

    return setup


def _patch(edit: Callable[[str], str]) -> Callable:
    def setup(cookbook, site, monkeypatch):
        patch = cookbook.root / "fixes" / "runner-fix" / "v0.26.0.patch"
        patch.write_text(edit(patch.read_text()))
        return ["apply", "--profile", "v0.26.0", "--site", str(site.path)]

    return setup


def _wrong_count(text: str) -> str:
    head, _, rest = text.partition("@@ -")
    numbers, _, tail = rest.partition(" @@")
    old, new = numbers.split(" +")
    return f"{head}@@ -{old} +{new.split(',')[0]},99 @@{tail}"


def _truncated(text: str) -> str:
    return "\n".join(text.splitlines()[:-2]) + "\n"


def _bad_site_variable(cookbook, site, monkeypatch):
    monkeypatch.setenv("FIXPACK_SITE", str(site.path / "nowhere"))
    return ["apply", "--profile", "v0.26.0"]


def _bad_cookbook(cookbook, site, monkeypatch):
    monkeypatch.setenv("FIXPACK_COOKBOOK", str(site.path / "nowhere"))
    return ["apply", "--profile", "v0.26.0", "--site", str(site.path)]


def _short_commit(cookbook, site, monkeypatch):
    (site.path / "vllm_gaudi" / "_version.py").write_text("__commit_id__ = 'gb059f9'\n")
    return ["apply", "--profile", "v0.26.0", "--site", str(site.path)]


def _two_dist_infos(cookbook, site, monkeypatch):
    twin = site.path / "vllm_gaudi-0.25.0.dist-info"
    twin.mkdir()
    (twin / "METADATA").write_text("Metadata-Version: 2.1\nName: vllm-gaudi\nVersion: 0.25.0\n")
    return ["apply", "--profile", "v0.26.0", "--site", str(site.path)]


def _nothing_installed(cookbook, site, monkeypatch):
    empty = site.path.parent / "empty"
    empty.mkdir()
    return ["status", "--site", str(empty)]


def _no_torch(cookbook, site, monkeypatch):
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "torch" else real(name, *a))
    return ["verify", *(f"--source={d}={p}" for d, p in cookbook.sources.items())]


def _site_a_file(cookbook, site, monkeypatch):
    return ["status", "--site", str(site.path / "vllm_gaudi" / "runner.py")]


def _unknown_option(cookbook, site, monkeypatch):
    return ["apply", "--profile", "v0.26.0", "--site", str(site.path), "--dry-runn"]


CASES = {
    "METADATA empty": (_metadata(b""), 3, "has no Name or Version"),
    "METADATA not UTF-8": (_metadata(b"Name: vllm-gaudi\nVersion: 0.26.0\nSummary: \xff\xfe\n"), 3, "unreadable"),
    "hunk header with a wrong count": (_patch(_wrong_count), 2, "invalid patch of fix runner-fix"),
    "patch truncated mid-hunk": (_patch(_truncated), 2, "invalid patch of fix runner-fix"),
    "bad FIXPACK_SITE": (_bad_site_variable, 3, "FIXPACK_SITE"),
    "bad FIXPACK_COOKBOOK": (_bad_cookbook, 2, "(FIXPACK_COOKBOOK) is not a cookbook"),
    "a 6-hex commit": (_short_commit, 1, "too short to match"),
    "two dist-infos for one distribution": (_two_dist_infos, 3, "2 installs of vllm-gaudi"),
    "nothing installed": (_nothing_installed, 3, "neither of vllm, vllm-gaudi is installed"),
    "verify without torch": (_no_torch, 3, "the proofs need torch"),
    # click's own errors, one line as fixpack's (issue 57): what, and where the help is
    "--site naming a file": (_site_a_file, 2, "Invalid value for '--site': Directory"),
    "an unknown option": (_unknown_option, 2, "No such option '--dry-runn'. Did you mean '--dry-run'?"),
}


@pytest.mark.parametrize("case", CASES)
def test_bad_input_is_one_line_with_its_exit_code(case, cli, cookbook, site, monkeypatch):
    _pack(cookbook)
    setup, code, words = CASES[case]
    args = setup(cookbook, site, monkeypatch)
    before = site.snapshot()
    r = cli(*args)
    errors = [line for line in r.stderr.splitlines() if line.startswith("fixpack: error:")]
    assert r.exit_code == code, r.output
    assert len(errors) == 1 and words in errors[0], r.stderr
    assert NEXT_STEP.search(errors[0]), f"no next step in: {errors[0]}"  # issue 57
    assert "Traceback" not in r.output
    assert site.snapshot() == before


def test_json_errors_have_each_commands_shape(cli, cookbook, site, monkeypatch):
    _pack(cookbook)
    monkeypatch.setenv("FIXPACK_COOKBOOK", str(site.path / "nowhere"))
    shapes = {
        ("apply", "--profile", "v0.26.0"): {"ok", "profile", "fixes", "error", "notes"},
        ("revert",): {"ok", "profile", "fixes", "error", "notes"},
        ("status",): {"profile", "distributions", "fixes", "notes", "error"},
        ("list",): {"profile", "fixes", "error"},
        ("verify",): {"ok", "results", "error"},
    }
    for args, keys in shapes.items():
        r = cli(*args, "--json", "--site", str(site.path)) if args[0] != "verify" else cli(*args, "--json")
        assert r.exit_code == 2
        assert set(json.loads(r.stdout)) == keys, args


def test_an_unparsable_version_py_is_named(cli, cookbook, tmp_path):
    _pack(cookbook)
    site = make_site(tmp_path, commits={"vllm": None, "vllm-gaudi": GAUDI_COMMIT})
    (site.path / "vllm_gaudi" / "_version.py").write_text("__commit_id__ = (\n")
    r = cli("status", "--site", str(site.path), "--json")
    dist = {d["name"]: d for d in json.loads(r.stdout)["distributions"]}["vllm-gaudi"]
    assert dist["commit"] is None and "_version.py could not be parsed (SyntaxError" in dist["commit_source"]


# A misspelt key in fix.toml or a profile: (file, the line as written, the line misspelt, the key and
# its table, the suggestion). Each table the loaders read: the top level, a table, a table per
# release, an entry of an array of tables.
MISSPELT = {
    "fix.toml, top level": (
        "fixes/runner-fix/fix.toml",
        "requires = []",
        "requries = []",
        "'requries' in the top-level table",
        "(did you mean 'requires'?)",
    ),
    "fix.toml, [upstream]": (
        "fixes/runner-fix/fix.toml",
        'status = "pending"',
        'status = "pending"\nstatuss = "submitted"',
        "'statuss' in [upstream]",
        "(did you mean 'status'?)",
    ),
    "fix.toml, [release]": (
        "fixes/runner-fix/fix.toml",
        'patch = "v0.26.0.patch"',
        'patch = "v0.26.0.patch"\ntransform = "x.py"',
        "'transform' in [release.\"v0.26.0\"]",
        "(did you mean 'transforms'?)",
    ),
    "fix.toml, [proof]": (
        "fixes/runner-fix/fix.toml",
        'reason = "test fix"',
        'reasons = "test fix"',
        "'reasons' in [proof]",
        "(did you mean 'reason'?)",
    ),
    "fix.toml, [[proof.unreachable]]": (
        "fixes/runner-fix/fix.toml",
        'reason = "test fix"',
        'reason = "test fix"\n[[proof.unreachable]]\nline = "h1:+1"\nwhy = "it is"\ncomment = "x"',
        "'comment' in [[proof.unreachable]] #1",
        "(known: line, why)",
    ),
    "fix.toml, [[proof.harmless]]": (
        "fixes/runner-fix/fix.toml",
        'reason = "test fix"',
        'reason = "test fix"\n[[proof.harmless]]\nmutant = "h1:revert"\nwhy = "it is"\n'
        '[[proof.harmless]]\nmutnat = "h1:+1:const:+1"\nwhy = "it is"',
        "'mutnat' in [[proof.harmless]] #2",
        "(did you mean 'mutant'?)",
    ),
    "profile, top level": (
        "profiles/v0.26.0.toml",
        "opt_ins = []",
        "opt_ins = []\nopt_in = []",
        "'opt_in' in the top-level table",
        "(did you mean 'opt_ins'?)",
    ),
    "profile, [[pin]]": (
        "profiles/v0.26.0.toml",
        'package = "vllm"\n',
        'package = "vllm"\nversoin = "0.26.0"\n',
        "'versoin' in [[pin]] #1",
        "(did you mean 'version'?)",
    ),
}


@pytest.mark.parametrize("case", MISSPELT)
def test_a_misspelt_key_exits_2_naming_the_file_the_key_and_the_nearest_one(case, cli, cookbook, site):
    _pack(cookbook)
    rel, old, new, key, hint = MISSPELT[case]
    path = cookbook.root / rel
    text = path.read_text()
    assert text.count(old) == 1, old
    path.write_text(text.replace(old, new))
    before, book_before = site.snapshot(), {p: p.read_bytes() for p in cookbook.root.rglob("*") if p.is_file()}
    sources = [f"--source={d}={p}" for d, p in cookbook.sources.items()]
    for args in (["list"], ["apply", "--profile", "v0.26.0", "--site", str(site.path)], ["verify", *sources]):
        r = cli(*args)
        assert r.exit_code == 2, (args, r.output)
        errors = [line for line in r.stderr.splitlines() if line.startswith("fixpack: error:")]
        assert len(errors) == 1 and "Traceback" not in r.output, r.output
        assert f"invalid {path}: unknown key {key} {hint}" in errors[0], errors[0]
    assert site.snapshot() == before
    assert {p: p.read_bytes() for p in cookbook.root.rglob("*") if p.is_file()} == book_before


def test_the_proofs_dependencies_are_the_proofs_extras(monkeypatch):
    """Issue 57: request-body-object's proof imports fastapi (its test client httpx), which no extra
    declared, and the check knew only torch and numpy. Every module a proof imports beyond the
    standard library, fixpack and the trees is in the extra the check reads."""
    import ast
    import sys

    from fixpack import extras

    monkeypatch.setattr(extras, "requires", lambda name: (_ for _ in ()).throw(extras.PackageNotFoundError(name)))
    declared = {r.name for r in extras.declared("proofs")}  # from pyproject.toml, as a checkout not installed
    assert {"torch", "numpy", "fastapi", "httpx"} <= declared
    repo = Path(__file__).resolve().parent.parent
    imported = set()
    for proof in (repo / "fixes").glob("*/proof.py"):
        for node in ast.walk(ast.parse(proof.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                imported |= {a.name.partition(".")[0] for a in node.names}
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                imported.add(node.module.partition(".")[0])
    ours = {"fixpack", "fixes", "vllm", "vllm_gaudi", "__future__"}  # fixes/_support: the cookbook's own
    third_party = imported - set(sys.stdlib_module_names) - ours
    assert third_party <= declared, third_party - declared
