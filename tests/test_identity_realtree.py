"""The fix-set identity on the real v0.26.0 pack over a real site: the digest of an overlay pins
the in-place apply of the same request, and refuses one with an opt-in fewer. Skipped, saying
why, without FIXPACK_SRC_VLLM_GAUDI and FIXPACK_SRC_VLLM."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from builders import REPO
from realtree import PROFILE, REALTREE, opt_ins_of, run_python, tree_hashes
from runs import shown_as_printed

pytestmark = REALTREE
APPLY_ALL = str(REPO / "fixes" / "apply_all.py")


def _fix_set(site: Path, *extra: str) -> dict:
    r = run_python("-m", "fixpack", "status", "--site", str(site), "--json", *extra)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)["fix_set"]


def test_an_overlay_s_digest_pins_the_in_place_apply(real_site: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    pristine = tree_hashes(real_site)
    overlay = tmp_path / "overlay"
    opt_ins = opt_ins_of()
    built = run_python(APPLY_ALL, "--profile", PROFILE, "--site", str(real_site), *opt_ins, "--overlay", str(overlay))
    assert built.returncode == 0, built.stderr
    pinned = _fix_set(real_site, "--overlay", str(overlay))
    assert len(pinned["fixes"]) > len(opt_ins) >= 1
    fewer = run_python(
        APPLY_ALL, "--profile", PROFILE, "--site", str(real_site), *opt_ins[1:], "--expect-fix-set", pinned["digest"]
    )
    assert fewer.returncode == 1, fewer.stderr
    assert f"--expect-fix-set {pinned['digest']}: this apply would leave fix set" in fewer.stderr
    assert opt_ins[0] not in fewer.stderr.rpartition("fixes: ")[2].partition(")")[0].split(", ")
    assert tree_hashes(real_site) == pristine
    monkeypatch.setenv("FIXPACK_EXPECT_FIX_SET", pinned["digest"])
    try:
        done = run_python(APPLY_ALL, "--profile", PROFILE, "--site", str(real_site), *opt_ins)
        assert done.returncode == 0, done.stderr
        assert _fix_set(real_site) == pinned  # in place, the same code as the overlay: the same identity
        index = json.loads((real_site / "fixpack_runtime_check" / "index.json").read_text())
        assert index["fix_set"] == pinned
    finally:
        monkeypatch.delenv("FIXPACK_EXPECT_FIX_SET")
        assert run_python("-m", "fixpack", "revert", "--site", str(real_site)).returncode == 0
    assert tree_hashes(real_site) == pristine


# Each documented line that shows the pack's fix set, and its fix count (issue 57: the docs'
# examples are a real run's). Other digests are shown only in docs/operators/fix-set.md's refusal,
# which an engine test's small cookbook printed (test_identity.py), in readme-map.md's row for the
# README's old example that was never the pack's, and in multi-node.md's disagreement (below).
DOCUMENTED = [
    REPO / "README.md",
    *sorted((REPO / "docs").rglob("*.md")),
    REPO / "fixpack" / "runtime" / "check.py",
]
SHOWN = re.compile(
    r"(?:fix set |--expect-fix-set |FIXPACK_EXPECT_FIX_SET=|\"fixpack:fix-set\", \"value\": \"|\"digest\": \"|`)"
    r"([0-9a-f]{16})\b(?:\W{1,3}\(?(\d+) fixes)?"
)
NOT_THE_PACK = {"fb3bc5a91aea4f55", "880a95dd671ab33c", "3f2a9c0d51e7b4c1"}


def test_the_docs_show_the_real_digest_of_the_pack(real_site: Path, tmp_path: Path):
    """v0.26.0 with its opt-ins, as the README's command applies it: every digest the docs show for
    it is the one a real apply gives, with its count of fixes; multi-node.md's disagreement is the
    line the agreement prints for that set against the set without gdn-prefix-cache."""
    opt_ins = opt_ins_of()
    sets = {}
    for name, chosen in (("all", opt_ins), ("without gdn", [o for o in opt_ins if o != "gdn-prefix-cache"])):
        overlay = tmp_path / name.replace(" ", "-")
        where = ("--site", str(real_site), "--overlay", str(overlay))
        built = run_python(APPLY_ALL, "--profile", PROFILE, *chosen, *where)
        assert built.returncode == 0, built.stderr
        sets[name] = _fix_set(real_site, "--overlay", str(overlay))
    pack = sets["all"]
    shown = [
        (path.relative_to(REPO), m.group(1), m.group(2))
        for path in DOCUMENTED
        for m in SHOWN.finditer(path.read_text(encoding="utf-8"))
        if m.group(1) not in {*NOT_THE_PACK, sets["without gdn"]["digest"]}
    ]
    assert len(shown) >= 10
    wrong = [(p, d, n) for p, d, n in shown if d != pack["digest"] or n not in (None, str(len(pack["fixes"])))]
    assert not wrong, f"the pack's fix set is {pack['digest']} ({len(pack['fixes'])} fixes)"

    from fixpack.runtime.agree import disagreement

    records = [
        {"rank": r, "host": host, "profile": PROFILE, "digest": s["digest"], "fixes": s["fixes"], "drifted": []}
        for r, host, s in [*((r, "node-a", pack) for r in range(3)), (3, "node-b", sets["without gdn"])]
    ]
    line = disagreement(records, [], 4, 120)
    assert line is not None and line in (REPO / "docs" / "operators" / "multi-node.md").read_text(), line


def _block_after(text: str, heading: str) -> list[str]:
    """The lines of the first code block after ``heading`` (fenced, or indented by four spaces)."""
    rest = text.split(heading, 1)[1]
    found = re.search(r"```text\n(.*?)```|\n\n((?:    [^\n]*\n)+)", rest, re.S)
    assert found, heading
    if found.group(1) is not None:
        return found.group(1).rstrip("\n").split("\n")
    return [line[4:] for line in found.group(2).rstrip("\n").split("\n")]


def test_the_readme_and_getting_started_show_what_the_apply_prints(real_site: Path):
    """Issue 57: the docs' examples are real runs. The README's main command's apply, as the pages
    show it (its notes, then a line per fix and the summary)."""
    done = run_python(APPLY_ALL, "--profile", PROFILE, "--site", str(real_site), *opt_ins_of())
    try:
        assert done.returncode == 0, done.stderr
        printed = done.stderr.rstrip("\n").split("\n") + done.stdout.rstrip("\n").split("\n")
        for page, heading in (
            (REPO / "README.md", "Then the apply names the commits it read"),
            (REPO / "docs" / "getting-started.md", "The apply names the commits it read"),
        ):
            shown = _block_after(page.read_text(encoding="utf-8"), heading)
            assert shown_as_printed(shown, printed), f"{page.name} shows:\n" + "\n".join(shown)
        # json.md's status example: its keys in order, and each list's first items as a real status has them
        status = run_python("-m", "fixpack", "status", "--site", str(real_site), "--json")
        real = json.loads(status.stdout.replace(str(real_site), "/tmp/fixpack-site"))
        (line,) = _block_after((REPO / "docs" / "reference" / "json.md").read_text(encoding="utf-8"), "# JSON shapes")[
            1:
        ]
        assert _leads(json.loads(line.replace(", ...", "")), real), line
        # in-place.md's drift: the same local edit, the apply's refusal and the edit it shows
        edited = real_site / "vllm_gaudi" / "v1" / "worker" / "hpu_input_batch.py"
        applied = edited.read_bytes()
        edited.write_bytes(applied + b"# local edit\n")
        refused = run_python(APPLY_ALL, "--profile", PROFILE, "--site", str(real_site), *opt_ins_of())
        edited.write_bytes(applied)
        assert refused.returncode == 1, refused.stderr
        said = refused.stderr.replace(str(real_site), "SITE").split("\n")
        said = said[next(i for i, ln in enumerate(said) if ln.startswith("fixpack: error:")) :]  # notes before it aside
        page = (REPO / "docs" / "operators" / "in-place.md").read_text(encoding="utf-8")
        shown = _block_after(page, "the message shows the edit:")
        assert shown_as_printed(shown, [ln for ln in said if ln]), "\n".join(said)
    finally:
        assert run_python("-m", "fixpack", "revert", "--site", str(real_site)).returncode == 0


def _leads(shown: object, real: object) -> bool:
    """``shown`` is ``real`` cut short: the same keys in the same order, each list's items the first
    ones of the real list (the docs write "..." for the rest)."""
    if isinstance(shown, dict) and isinstance(real, dict):
        return list(shown) == list(real) and all(_leads(shown[k], real[k]) for k in shown)
    if isinstance(shown, list) and isinstance(real, list):
        return len(shown) <= len(real) and all(_leads(a, b) for a, b in zip(shown, real))
    return shown == real
