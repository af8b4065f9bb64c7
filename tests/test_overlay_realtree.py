"""The real v0.26.0 pack as an overlay over a real site: nothing under the site changes, and a
process with the overlay on PYTHONPATH finds every patched module in the overlay, with the bytes
an in-place apply writes. Skipped, saying why, without FIXPACK_SRC_VLLM_GAUDI and FIXPACK_SRC_VLLM."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from builders import REPO
from realtree import PROFILE, REALTREE, opt_ins_of, run_python, tree_hashes

from fixpack.installation.plugin import module_name

pytestmark = REALTREE
FIND = """
import importlib.util, json, sys
import sitecustomize
finder = sitecustomize.active()
out = {}
for name in sys.argv[1:]:
    # vllm_gaudi's packages import without habana_frameworks: the import system's own lookup;
    # vLLM's parent packages need its dependencies, so its modules are asked of the overlay's finder
    spec = importlib.util.find_spec(name) if name.startswith("vllm_gaudi.") else finder.find_spec(name)
    out[name] = spec.origin
print(json.dumps(out))
"""


def test_the_pack_as_an_overlay_gives_the_bytes_in_place_apply_writes(real_site: Path, tmp_path: Path):
    pristine = tree_hashes(real_site)
    overlay = tmp_path / "overlay"
    apply_all = str(REPO / "fixes" / "apply_all.py")
    r = run_python(apply_all, "--profile", PROFILE, "--site", str(real_site), *opt_ins_of(), "--overlay", str(overlay))
    assert r.returncode == 0, r.stderr
    assert tree_hashes(real_site) == pristine  # nothing under the site
    index = json.loads((overlay / "fixpack_runtime_check" / "index.json").read_text())
    modules = {module_name(e["path"]): e["path"] for e in index["files"]}
    assert any(m.startswith("vllm_gaudi.") for m in modules) and any(m.startswith("vllm.") for m in modules)
    env = {k: v for k, v in os.environ.items() if not k.startswith("FIXPACK_")}
    env["PYTHONPATH"] = f"{overlay}{os.pathsep}{real_site}"
    found = subprocess.run(
        [sys.executable, "-c", FIND, *modules], capture_output=True, text=True, env=env, timeout=300, cwd=tmp_path
    )
    assert found.returncode == 0, found.stderr
    origins = json.loads(found.stdout)
    served = {}
    for name, path in modules.items():
        assert origins[name] == str(overlay / ".fixpack" / "modules" / path), name
        served[path] = Path(origins[name]).read_bytes()
    # The same plan in place writes the same bytes.
    assert run_python(apply_all, "--profile", PROFILE, "--site", str(real_site), *opt_ins_of()).returncode == 0
    try:
        for path, content in served.items():
            assert (real_site / path).read_bytes() == content, path
    finally:
        assert run_python("-m", "fixpack", "revert", "--site", str(real_site)).returncode == 0
    assert tree_hashes(real_site) == pristine


@pytest.mark.parametrize("flag", ["--dry-run"])
def test_status_of_the_real_overlay(real_site: Path, tmp_path: Path, flag: str):
    overlay = tmp_path / "overlay"
    apply_all = str(REPO / "fixes" / "apply_all.py")
    dry = run_python(apply_all, "--profile", PROFILE, "--site", str(real_site), "--overlay", str(overlay), flag)
    assert dry.returncode == 0, dry.stderr
    assert not overlay.exists()
    assert (
        run_python(apply_all, "--profile", PROFILE, "--site", str(real_site), "--overlay", str(overlay)).returncode == 0
    )
    st = run_python("-m", "fixpack", "status", "--site", str(real_site), "--overlay", str(overlay), "--json")
    states = {f["id"]: f["state"] for f in json.loads(st.stdout)["fixes"]}
    assert set(states.values()) == {"applied"}, states
    assert run_python("-m", "fixpack", "revert", "--site", str(real_site), "--overlay", str(overlay)).returncode == 0
    assert not overlay.exists()
