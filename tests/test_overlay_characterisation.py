"""What an overlay's state must keep meaning, whatever its code becomes (issue 48): a copy in the
overlay edited after the apply, or the original it shadows changed under it, is drifted for
``status``; ``apply`` over an edited copy rebuilds it. Written before the destination is
reworked, so that the rework is held to them."""

from __future__ import annotations

import json
from pathlib import Path

from cookbooks import three_fixes
from runs import apply_overlay, py

RUNNER = "vllm_gaudi/runner.py"  # fixes one and two both patch it; three does not


def _overlaid(cookbook, site, tmp_path: Path) -> Path:
    three_fixes(cookbook)
    overlay = tmp_path / "overlay"
    done = apply_overlay(cookbook, site, overlay)
    assert done.returncode == 0, done.stderr
    return overlay


def _states(cli, site, overlay: Path) -> dict[str, str]:
    st = json.loads(cli("status", "--site", str(site.path), "--overlay", str(overlay), "--json").stdout)
    return {f["id"]: f["state"] for f in st["fixes"]}


def _copy(overlay: Path, path: str) -> Path:
    return overlay / ".fixpack" / "modules" / path


def test_status_says_drifted_for_an_edited_copy(cookbook, site, tmp_path, cli):
    overlay = _overlaid(cookbook, site, tmp_path)
    copy = _copy(overlay, RUNNER)
    copy.write_text(copy.read_text() + "# edited in the overlay\n")
    assert _states(cli, site, overlay) == {"one": "drifted", "two": "drifted", "three": "applied"}


def test_status_says_drifted_when_the_original_changes_under_the_overlay(cookbook, site, tmp_path, cli):
    overlay = _overlaid(cookbook, site, tmp_path)
    original = site.file(RUNNER)
    original.write_text(original.read_text() + "# another build of the image\n")
    assert _states(cli, site, overlay) == {"one": "drifted", "two": "drifted", "three": "applied"}


def test_apply_over_an_edited_copy_rebuilds_it(cookbook, site, tmp_path, cli):
    overlay = _overlaid(cookbook, site, tmp_path)
    copy = _copy(overlay, RUNNER)
    applied = copy.read_bytes()
    copy.write_text(copy.read_text() + "raise SystemExit('edited')\n")
    done = apply_overlay(cookbook, site, overlay, "--json")
    assert done.returncode == 0, done.stderr
    assert copy.read_bytes() == applied
    assert _states(cli, site, overlay) == {"one": "applied", "two": "applied", "three": "applied"}
    assert py("import vllm_gaudi.runner as r; print(r.f2(), r.f7())", overlay, site.path).stdout.split() == ["20", "70"]
