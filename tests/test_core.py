"""The pure core and the state formats, in-process: plan resolution and dependents, recognising
an installed file and rebuilding it, and the manifest's round trip."""

from __future__ import annotations

import pytest

from fixpack.core import rebuild, recognise
from fixpack.core.fingerprint import of, sha256
from fixpack.core.patch import render
from fixpack.core.plan import applied_orders, chains, pack_chain, resolve, restrict, with_dependents
from fixpack.errors import Refused, UsageError
from fixpack.installation.manifest import Manifest
from fixpack.models import Change, FileEntry, FileState, Fingerprint, Fix, Pin, Profile, Proof, Upstream

BASE = b"".join(b"def f%d():\n    return %d\n\n\n" % (i, i) for i in range(20))
ONE = BASE.replace(b"return 3\n", b"return 30\n")
TWO = ONE.replace(b"return 15\n", b"return 150\n")


def change(fix_id: str, before: bytes | None, after: bytes | None, path: str = "pkg/m.py", pristine=BASE) -> Change:
    fp = Fingerprint(of(pristine), of(before), of(after))
    return Change(fix_id, "r1", path, render(path, before, after), fp, before is None, after is None)


def fix(fix_id: str, *changes: Change, requires=(), conflicts=(), opt_in=False) -> Fix:
    return Fix(
        id=fix_id,
        title=f"title {fix_id}",
        why="why",
        requires=tuple(requires),
        conflicts=tuple(conflicts),
        opt_in=opt_in,
        upstream=Upstream(status="pending"),
        proof=Proof(level="none", reason="test"),
        verified_on="",
        changes={"r1": changes},
    )


PIN = (Pin(dist="d", package="pkg", version="1.0", commits=("abc",)),)


def profile(pack: list[str], opt_ins: list[str] = ()) -> Profile:  # type: ignore[assignment]
    return Profile(name="p1", release="r1", description="", pins=PIN, pack=tuple(pack), opt_ins=tuple(opt_ins))


# plan -------------------------------------------------------------------------------------------


def test_resolve_orders_by_pack_and_pulls_requirements_in_ahead():
    fixes = {
        "a": fix("a", change("a", BASE, ONE)),
        "b": fix("b", requires=["c"], opt_in=True),
        "c": fix("c", opt_in=True),
    }
    plan = resolve(fixes, profile(["a", "b", "c"], ["b", "c"]), ("b",))
    assert plan.fix_ids == ("a", "c", "b")  # c comes before b, which requires it
    assert plan.pulled_in == {"c": "b"}
    assert [pc.dist for pc in plan.changes] == ["d"]
    assert restrict(plan, {"b"}).fix_ids == ("c", "b")


@pytest.mark.parametrize(
    ("fixes", "pack", "asked", "message"),
    [
        ({"a": fix("a")}, ["a"], ("zz",), "unknown fix 'zz'"),
        ({"a": fix("a"), "b": fix("b", opt_in=True)}, ["a"], ("b",), "not part of profile"),
        ({"a": fix("a", requires=["b"]), "b": fix("b", requires=["a"])}, ["a", "b"], (), "cycle"),
        ({"a": fix("a", conflicts=["b"]), "b": fix("b")}, ["a", "b"], (), "conflicts with 'b'"),
        ({"a": fix("a", requires=["x"]), "x": fix("x")}, ["a"], (), "profile 'p1' does not have"),
    ],
)
def test_resolve_refuses(fixes, pack, asked, message):
    with pytest.raises(UsageError, match=message):
        resolve(fixes, profile(pack), asked)


def test_an_opt_in_supersedes_a_default_fix():
    fixes = {
        "guard": fix("guard"),
        "full": fix("full", opt_in=True),
        "user": fix("user", requires=["guard"]),
    }
    object.__setattr__(fixes["full"], "supersedes", ("guard",))
    prof = profile(["guard", "full"], ["full"])
    assert resolve(fixes, prof).fix_ids == ("guard",)
    plan = resolve(fixes, prof, ("full",), keep=("guard",))  # applied before: taken out now
    assert plan.fix_ids == ("full",) and plan.superseded == {"guard": "full"}
    with pytest.raises(UsageError, match="supersedes 'guard'; ask for one of them"):
        resolve(fixes, prof, ("full", "guard"))
    with pytest.raises(UsageError, match="requires 'guard', which 'full' supersedes"):
        resolve(fixes, profile(["guard", "full", "user"], ["full"]), ("full",))


def test_each_fix_is_locked_in_the_order_it_is_applied_in():
    fixes = {f: fix(f) for f in ("a", "guard", "full", "b")}
    object.__setattr__(fixes["full"], "supersedes", ("guard",))
    prof = profile(["a", "guard", "full", "b"], ["full"])
    # With every opt-in the guard is left out; the guard itself is locked without what supersedes it.
    assert applied_orders(fixes, prof) == [("a", "full", "b"), ("a", "guard", "b")]
    assert applied_orders(fixes, profile(["a", "b"])) == [("a", "b")]


def test_with_dependents_names_what_each_depends_on():
    fixes = {"a": fix("a"), "b": fix("b", requires=["a"]), "c": fix("c", requires=["b"]), "d": fix("d")}
    assert with_dependents(fixes, {"a"}, ("a", "b", "c", "d")) == {"a": None, "b": "a", "c": "b"}


def test_chains_and_pack_chain_follow_the_pack():
    one, two = change("one", BASE, ONE), change("two", ONE, TWO)
    fixes = {"one": fix("one", one), "two": fix("two", two)}
    assert pack_chain(fixes, profile(["one", "two"]), "pkg/m.py") == [one, two]
    assert chains(fixes.values(), "r1") == {"pkg/m.py": [one, two]}


# recognise and rebuild --------------------------------------------------------------------------


def test_rebuild_applies_a_chain_and_reverse_undoes_it():
    chain = [change("one", BASE, ONE), change("two", ONE, TWO)]
    assert rebuild.build(BASE, chain) == TWO
    assert rebuild.reverse(TWO, chain) == BASE
    assert rebuild.build(BASE, chain[1:]) == BASE.replace(b"return 15\n", b"return 150\n")  # at an offset
    assert rebuild.line_counts(chain[0]) == (1, 1)


THREE = TWO.replace(b"return 18\n", b"return 180\n")


def test_rebuild_checks_each_locked_run_and_goes_one_by_one_past_a_broken_link():
    # "skip" was locked between two and three, but is not applied: three's before-hash is not met,
    # so one and two are checked as a run and three is applied by its hunks alone.
    three = change("three", TWO, THREE)
    skipped = TWO.replace(b"return 1\n", b"return 10\n")
    three = Change("three", "r1", "pkg/m.py", three.patch, Fingerprint(of(BASE), of(skipped), of(THREE)))
    chain = [change("one", BASE, ONE), change("two", ONE, TWO), three]
    assert rebuild.build(BASE, chain) == THREE
    # A run whose end does not match its lock is refused, naming the change that went wrong.
    two = change("two", ONE, TWO)
    stale = [change("one", BASE, ONE), Change("two", "r1", "pkg/m.py", two.patch, Fingerprint(of(BASE), of(ONE), "0"))]
    with pytest.raises(Refused, match="does not match the locked after-hash") as refused:
        rebuild.build(BASE, stale)
    assert refused.value.fix_id == "two"


def test_rebuild_refuses_with_the_fix_and_the_path():
    with pytest.raises(Refused) as refused:
        rebuild.build(BASE.replace(b"return 3\n", b"return 4\n"), [change("one", BASE, ONE)])
    assert refused.value.fix_id == "one" and refused.value.path == "pkg/m.py"
    assert "hunk #1" in refused.value.message and refused.value.details


def test_compile_error_names_the_line():
    assert rebuild.compile_error("pkg/m.py", b"def f(:\n").startswith("pkg/m.py:1: SyntaxError")
    assert rebuild.compile_error("pkg/m.py", ONE) is None
    assert rebuild.compile_error("pkg/data.txt", b"def f(:\n") is None


@pytest.mark.parametrize(
    ("current", "state", "applied"),
    [
        (BASE, FileState.PRISTINE, ()),
        (ONE, FileState.APPLIED, ("one",)),  # no manifest: a prefix of the locked chain
        (TWO, FileState.APPLIED, ("one", "two")),
        (None, FileState.MISSING, ()),
        (BASE + b"# edited\n", FileState.DRIFTED, ()),
    ],
)
def test_recognise_without_a_manifest(current, state, applied):
    chain = [change("one", BASE, ONE), change("two", ONE, TWO)]
    base = recognise.base_of("pkg/m.py", current, None, chain)
    assert (base.state, base.applied) == (state, applied)
    if state in (FileState.PRISTINE, FileState.APPLIED):
        assert base.pristine == BASE


def test_recognise_with_a_record_and_the_kept_copy():
    chain = [change("one", BASE, ONE), change("two", ONE, TWO)]
    record = FileEntry("d", sha256(BASE), sha256(TWO), ("one", "two"))
    assert recognise.base_of("pkg/m.py", TWO, record, chain, stored=BASE).applied == ("one", "two")
    # The patches changed since: the kept copy still gives the pristine bytes.
    other = [change("one", BASE, BASE.replace(b"return 9\n", b"return 90\n"))]
    assert recognise.base_of("pkg/m.py", TWO, record, other, stored=BASE).pristine == BASE
    drifted = recognise.base_of("pkg/m.py", TWO + b"#\n", record, chain, stored=BASE)
    assert drifted.state is FileState.DRIFTED and "changed after fixpack applied one, two" in drifted.problem


def test_explain_edit_shows_the_hand_edit():
    text = recognise.explain_edit("pkg/m.py", ONE, ONE.replace(b"return 7\n", b"return 77\n"))
    assert "-    return 7" in text and "+    return 77" in text


# the manifest -----------------------------------------------------------------------------------


def test_manifest_round_trip():
    files = {"pkg/m.py": FileEntry("d", sha256(BASE), sha256(TWO), ("one", "two"), ("p1", "p2"))}
    m = Manifest("p1", "r1", ("one", "two"), files, "2026-01-01T00:00:00+00:00", warm={"format": 1})
    again = Manifest.from_bytes(m.to_bytes())
    assert again == m and again.steps("pkg/m.py") == (("one", "p1"), ("two", "p2"))
    assert Manifest.from_bytes(None).empty  # absent: nothing applied; present but empty is unreadable
    for raw in (b"", b"[]", b'{"format": true}', b"[" * 100_000):
        with pytest.raises(ValueError):
            Manifest.from_bytes(raw)
    with pytest.raises(ValueError, match="format"):
        Manifest.from_bytes(b'{"format": 99}')
