"""The fix-set identity on the real v0.26.0 pack over a real site: the digest of an overlay pins
the in-place apply of the same request, and refuses one with an opt-in fewer. Skipped, saying
why, without FIXPACK_SRC_VLLM_GAUDI and FIXPACK_SRC_VLLM."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from builders import REPO
from realtree import PROFILE, REALTREE, opt_ins_of, run_python, tree_hashes

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
