"""verify --mutants: the mutants of a patch (each kind, compiling, stable ids), and a verify run in
which a strong proof catches every mutant and a weak one lets one survive until fix.toml explains it."""

from __future__ import annotations

import json

from builders import RUNNER, SAMPLER
from cookbooks import DOUBLING_PROOF
from trees import sources_args

from fixpack.core import patch
from fixpack.core.mutants import Target, mutants

BEFORE = '''\
def pick(rows, limit):
    out = []
    for i in range(len(rows)):
        out.append(rows[i])
    return out


def unchanged(a, b):
    total = a + b
    total += 1
    return total


def label(n):
    return "n"


def spacer(a):
    a += 1
    a += 2
    return a


def documented():
    """Says little."""
    return None
'''
AFTER = '''\
def pick(rows, limit):
    out = []
    for i in range(len(rows)):
        if i < limit and rows[i] is not None:
            out.append(rows[i][0])
    keep = True
    return out[1:limit] if keep else sorted(out, key=len)


def unchanged(a, b):
    total = a + b
    total += 1
    return total


def label(n):
    # [0] < 1 in a comment, and in a string: stay as they are
    return "n[0] < 1"


def spacer(a):
    a += 1
    a += 2
    return a


def documented():
    """Says more: a hunk of docstrings and comments is never left out, since it runs nothing."""
    return None
'''


def _mutants() -> list:
    diff = patch.render("pkg/mod.py", BEFORE.encode(), AFTER.encode())
    (fd,) = patch.parse(diff)
    return list(mutants([Target(fd, BEFORE.encode())]))


def test_each_kind_of_mutant_compiles_and_has_a_stable_id():
    found = _mutants()
    ids = [m.id for m in found]
    assert len(set(ids)) == len(ids)
    assert ids == [m.id for m in _mutants()]  # the same patch gives the same ids, in the same order
    for kind in (":revert", ":cmp:", ":index:", ":const:", ":arg:"):
        assert any(kind in i for i in ids), (kind, ids)
    by_id = {m.id: m for m in found}
    assert "if i <= limit and rows[i] is not None:" in by_id["h1:+1:cmp:<="].after.decode()
    assert "out.append(rows[i][1])" in by_id["h1:+2:index:[0]+1"].after.decode()
    assert "keep = False" in by_id["h1:+3:const:True>False"].after.decode()
    assert "out[1:limit - 1]" in by_id["h1:+4:index:[1:limit]hi-1"].after.decode()
    assert "sorted(key=len)" in by_id["h1:+4:arg:sorted:drop1"].after.decode()
    assert "sorted(out)" in by_id["h1:+4:arg:sorted:dropkey"].after.decode()
    assert '    return "n"\n' in by_id["h2:revert"].after.decode()
    assert not any(i.startswith("h3:") for i in ids)  # the docstring's hunk
    for m in found:
        compile(m.after, m.path, "exec")
        assert m.after != AFTER.encode()
        assert patch.apply(m.diff, BEFORE.encode()) == m.after  # the mutated diff gives the mutant
        assert "# [0] < 1 in a comment" in m.after.decode() or m.id == "h2:revert"
        assert '"n[0] < 1"' in m.after.decode() or m.id == "h2:revert"


def test_mutants_alternate_reverts_and_slips_over_the_hunks():
    ids = [m.id for m in _mutants()]
    assert ids[:4] == ["h1:revert", "h1:+1:cmp:<=", "h2:revert", ids[3]]
    assert ids[3].startswith("h1:+")  # hunk 2 changes only a comment and a string: nothing to mutate there


DISPLAYS_BEFORE = """\
def kinds(x, y):
    return ()
"""
DISPLAYS_AFTER = """\
def kinds(x: list[int], y: dict[str, int], z: None = None) -> None:
    a, b = [1, 2], (3, 4)
    pending = [x, y,
               (a, b)]
    table = {"k": a, "j": b}
    z = x[a, b] + table["k"]
    return (a, b) if isinstance(x, (int, float)) else {1, 2, 3}
"""


def _display_mutants() -> dict[str, str]:
    diff = patch.render("pkg/kinds.py", DISPLAYS_BEFORE.encode(), DISPLAYS_AFTER.encode())
    (fd,) = patch.parse(diff)
    found = list(mutants([Target(fd, DISPLAYS_BEFORE.encode())]))
    for m in found:
        compile(m.after, m.path, "exec")
    # An annotation is no code: of the first line, only the default is mutated.
    first = [m for m in found if m.id.startswith("h1:+1:")]
    assert [m.id for m in first] == ["h1:+1:const:None>True"]
    assert "z: None = True) -> None:" in first[0].after.decode()
    changed = {}
    for m in found:
        if ":elem:" in m.id:
            (line,) = (a for a, b in zip(m.after.decode().splitlines(), DISPLAYS_AFTER.splitlines()) if a != b)
            changed[m.id] = line.strip()
    return changed


def test_the_elem_slip_drops_one_element_of_a_display():
    changed = _display_mutants()
    assert changed == {
        # the right side of the assignment is a tuple of two displays; the target is not a display
        "h1:+2:elem:tuple:drop1": "a, b = (3, 4),",
        "h1:+2:elem:tuple:drop2": "a, b = [1, 2],",
        "h1:+2:elem:list:drop1": "a, b = [2], (3, 4)",
        "h1:+2:elem:list:drop2": "a, b = [1], (3, 4)",
        "h1:+2:elem:tuple:drop1#2": "a, b = [1, 2], (4,)",  # one element left: still a tuple
        "h1:+2:elem:tuple:drop2#2": "a, b = [1, 2], (3,)",
        # a display over two lines: each line's own elements
        "h1:+3:elem:list:drop1": "pending = [y,",
        "h1:+3:elem:list:drop2": "pending = [x,",
        "h1:+4:elem:list:drop3": "]",
        "h1:+4:elem:tuple:drop1": "(b,)]",
        "h1:+4:elem:tuple:drop2": "(a,)]",
        "h1:+5:elem:dict:drop1": 'table = {"j": b}',
        "h1:+5:elem:dict:drop2": 'table = {"k": a}',
        # h1:+6: an index and the annotations of h1:+1 are not displays
        "h1:+7:elem:tuple:drop1": "return (b,) if isinstance(x, (int, float)) else {1, 2, 3}",
        "h1:+7:elem:tuple:drop2": "return (a,) if isinstance(x, (int, float)) else {1, 2, 3}",
        "h1:+7:elem:set:drop1": "return (a, b) if isinstance(x, (int, float)) else {2, 3}",
        "h1:+7:elem:set:drop2": "return (a, b) if isinstance(x, (int, float)) else {1, 3}",
        "h1:+7:elem:set:drop3": "return (a, b) if isinstance(x, (int, float)) else {1, 2}",
        "h1:+7:elem:tuple:drop1#2": "return (a, b) if isinstance(x, (float,)) else {1, 2, 3}",
        "h1:+7:elem:tuple:drop2#2": "return (a, b) if isinstance(x, (int,)) else {1, 2, 3}",
    }
    assert changed == _display_mutants()  # stable


# f5 must return 55; this proof only checks that it returns at least 55, so 56 gets through.
WEAK_PROOF = """
from fixpack.proofkit import load_function


def check(trees) -> None:
    f5 = load_function(trees.vllm_gaudi / "vllm_gaudi/runner.py", "f5")
    assert f5() >= 55, f"f5() returned {f5()}"
"""


def _pack(cookbook) -> None:
    doubled = SAMPLER.replace("return x", "return x * 2")
    cookbook.fix("doubling", {"vllm/sampler.py": (SAMPLER, doubled)}, proof=DOUBLING_PROOF)
    fifty_five = RUNNER.replace("return 5\n", "return 55\n")
    cookbook.fix("weak", {"vllm_gaudi/runner.py": (RUNNER, fifty_five)}, proof=WEAK_PROOF)
    cookbook.fix("no-proof", {"vllm_gaudi/runner.py": (RUNNER, RUNNER.replace("return 9\n", "return 99\n"))})
    cookbook.profile(["doubling", "weak", "no-proof"])
    cookbook.lock()


def test_verify_mutants_reports_a_survivor_until_it_is_explained(cli, cookbook):
    _pack(cookbook)
    r = cli("verify", "--json", "--mutants", *sources_args(cookbook))
    assert r.exit_code == 1, r.output
    out = json.loads(r.stdout)
    assert set(out) == {"ok", "results", "mutants"} and not out["ok"]
    mutants = out["mutants"]
    assert {k: (v["caught"], v["total"]) for k, v in mutants.items()} == {
        "doubling": (3, 3),
        "weak": (2, 3),
        "no-proof": (0, 0),
    }
    assert mutants["no-proof"]["skipped"] == "no proof"
    (survivor,) = mutants["weak"]["survivors"]
    assert survivor["id"] == "h1:+1:const:+1"
    assert "-    return 55\n+    return 56\n" in survivor["diff"]
    weak = next(v for v in out["results"] if v["fix"] == "weak")
    assert weak["failures"] == ["mutant h1:+1:const:+1 survives: " + survivor["description"]]

    human = cli("verify", "--mutants", *sources_args(cookbook))
    assert human.exit_code == 1
    assert "  weak      caught 2/3" in human.stdout
    assert "      survives h1:+1:const:+1: vllm_gaudi/runner.py:22: return 55  ->  return 56" in human.stdout
    assert "      | +    return 56" in human.stdout
    assert "fixpack verify --mutants: 5/6 (83%) caught, 0 harmless (fix.toml), 1 survive unexplained" in human.stdout

    why = "f5 only has to reach 55: 56 serves as well."
    toml = cookbook.root / "fixes/weak/fix.toml"
    toml.write_text(
        toml.read_text()
        + f'\n[[proof.harmless]]\nmutant = "h1:+1:const:+1"\nwhy = "{why}"\n'
        + '\n[[proof.harmless]]\nmutant = "h1:+1:const:-1"\nwhy = "recorded before the proof caught it"\n'
    )
    r = cli("verify", "--json", "--mutants", *sources_args(cookbook))
    assert r.exit_code == 0, r.output
    out = json.loads(r.stdout)
    assert out["ok"] and out["mutants"]["weak"]["survivors"] == []
    explained = {"id": survivor["id"], "description": survivor["description"], "why": why}
    assert out["mutants"]["weak"]["explained"] == [explained]
    assert out["mutants"]["weak"]["unmatched_harmless"] == ["h1:+1:const:-1"]
    assert "unmatched_harmless" not in out["mutants"]["doubling"]


def test_verify_without_mutants_keeps_its_json(cli, cookbook):
    _pack(cookbook)
    r = cli("verify", "--json", *sources_args(cookbook))
    assert r.exit_code == 0, r.output
    assert set(json.loads(r.stdout)) == {"ok", "results"}


def test_a_harmless_mutant_needs_a_reason(cli, cookbook):
    _pack(cookbook)
    toml = cookbook.root / "fixes/weak/fix.toml"
    toml.write_text(toml.read_text() + '\n[[proof.harmless]]\nmutant = "h1:+1:const:+1"\nwhy = " "\n')
    r = cli("verify", "--json", "--mutants", *sources_args(cookbook))
    assert r.exit_code == 2
    assert "each [[proof.harmless]] needs a why" in json.loads(r.stdout)["error"]


def test_mutants_per_fix_bounds_each_fix_or_takes_all(cli, cookbook):
    _pack(cookbook)
    totals = {}
    for per_fix in ("1", "all"):
        r = cli("verify", "--json", "--mutants", "--mutants-per-fix", per_fix, *sources_args(cookbook))
        totals[per_fix] = {k: v["total"] for k, v in json.loads(r.stdout)["mutants"].items()}
    assert totals == {"1": {"doubling": 1, "weak": 1, "no-proof": 0}, "all": {"doubling": 3, "weak": 3, "no-proof": 0}}
    human = cli("verify", "--mutants", "--mutants-per-fix", "all", *sources_args(cookbook))
    assert "mutants: each fix's proof on every mutant of its patch" in human.stdout
    for bad in ("0", "-2", "some"):
        r = cli("verify", "--mutants", "--mutants-per-fix", bad, *sources_args(cookbook))
        assert r.exit_code == 2 and "is not a count of at least 1, nor 'all'" in r.output, r.output


def test_verify_fix_runs_the_named_fixes_alone_but_reports_any_pack_failure(cli, cookbook):
    _pack(cookbook)
    r = cli("verify", "--json", "--mutants", "--fix", "weak", *sources_args(cookbook))
    out = json.loads(r.stdout)
    assert r.exit_code == 1 and [v["fix"] for v in out["results"]] == ["weak"]  # its survivor fails it
    assert list(out["mutants"]) == ["weak"] and out["mutants"]["weak"]["total"] == 3
    r = cli("verify", "--json", "--fix", "doubling", *sources_args(cookbook))
    assert r.exit_code == 0 and [v["fix"] for v in json.loads(r.stdout)["results"]] == ["doubling"]

    # A fix left out is still reported when a check of the whole pack fails on it.
    toml = cookbook.root / "fixes/no-proof/fix.toml"
    toml.write_text(toml.read_text().replace("why = ", "why = 'TODO: say why' #", 1))
    r = cli("verify", "--json", "--fix", "doubling", *sources_args(cookbook))
    results = {v["fix"]: v for v in json.loads(r.stdout)["results"]}
    assert r.exit_code == 1 and set(results) == {"doubling", "no-proof"}
    assert results["no-proof"]["failures"] == ["metadata: 'why' is missing or a placeholder"]

    r = cli("verify", "--fix", "nope", *sources_args(cookbook))
    assert r.exit_code == 2 and "--fix nope: not a fix of the pack of" in r.output, r.output
