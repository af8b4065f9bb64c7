"""``fixpack sbom --merge`` onto what ``cyclonedx-py environment`` says of a real environment: the
serve venv (vLLM 0.26.0's CPU build beside vllm-gaudi v0.26.0, installed from a local folder, so
without a purl) copied, the v0.26.0 profile and both opt-ins applied in place. The merged document
is valid CycloneDX; vllm and vllm-gaudi carry the pedigree, one patch per fix that changed each;
every other component is as cyclonedx-py wrote it; a document without vllm-gaudi is refused, naming
it. Needs cyclonedx-py (cyclonedx-bom, in the test extra), run as a module of this interpreter (its
venv's ``bin`` need not be on ``PATH``); skips saying so without it."""

from __future__ import annotations

import importlib.util
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import build_env
import pytest
from build_env import ServeEnv
from vllm_serve import copy_env, entry_point, vllm_environ

REPO = build_env.REPO
PINNED = {"vllm", "vllm-gaudi"}


def _name(component: dict) -> str:
    return re.sub(r"[-_.]+", "-", component["name"]).lower()


def fixpack(*args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("FIXPACK_")}
    env["PYTHONPATH"] = str(REPO)
    return subprocess.run(
        [sys.executable, "-m", "fixpack", *args], capture_output=True, text=True, env=env, timeout=300, cwd=REPO
    )


def test_merge_onto_cyclonedx_py_environment(serve_env: ServeEnv, tmp_path: Path) -> None:
    if importlib.util.find_spec("cyclonedx_py") is None:
        pytest.skip("cyclonedx-py is not installed (cyclonedx-bom, in the test extra)")
    from cyclonedx.schema import SchemaVersion
    from cyclonedx.validation.json import JsonStrictValidator

    copy = copy_env(serve_env, tmp_path / "env")
    applied = subprocess.run(
        entry_point(copy.python, copy.site), capture_output=True, text=True, env=vllm_environ(copy.bin, 1), timeout=300
    )
    assert applied.returncode == 0, applied.stderr
    env_doc = tmp_path / "env.cdx.json"
    made = subprocess.run(
        [sys.executable, "-m", "cyclonedx_py", "environment", "--output-reproducible", "--sv", "1.6",
         "-o", str(env_doc), str(copy.python)],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert made.returncode == 0, made.stderr
    merged = tmp_path / "merged.cdx.json"
    done = fixpack("sbom", "--site", str(copy.site), "--merge", str(env_doc), "-o", str(merged))
    assert done.returncode == 0, done.stderr
    text = merged.read_text()
    assert JsonStrictValidator(SchemaVersion.V1_6).validate_str(text) is None

    before, after = json.loads(env_doc.read_text()), json.loads(text)
    alone = fixpack("sbom", "--site", str(copy.site))  # the document of the same site, on its own
    assert alone.returncode == 0, alone.stderr
    pedigree = {_name(c): c["pedigree"] for c in json.loads(alone.stdout)["components"] if "pedigree" in c}
    ours = {_name(c): c for c in after["components"] if _name(c) in PINNED}
    assert set(ours) == PINNED == set(pedigree)
    assert all(ours[name]["pedigree"] == pedigree[name] for name in PINNED)  # the same patches, diffs, issues
    patches = sum(len(p["patches"]) for p in pedigree.values())
    kept = {c["bom-ref"]: c for c in before["components"] if _name(c) not in PINNED}
    assert all(kept[c["bom-ref"]] == c for c in after["components"] if c["bom-ref"] in kept)
    assert set(kept) <= {c["bom-ref"] for c in after["components"]}
    # --output-reproducible leaves the serial number out: kept as it is, absent or not
    assert after.get("serialNumber") == before.get("serialNumber") and after["version"] == before["version"] + 1

    without = dict(before, components=[c for c in before["components"] if _name(c) != "vllm-gaudi"])
    lacking = tmp_path / "lacking.cdx.json"
    lacking.write_text(json.dumps(without))
    refused = fixpack("sbom", "--site", str(copy.site), "--merge", str(lacking))
    assert refused.returncode == 1 and "vllm-gaudi" in refused.stderr and len(refused.stderr.splitlines()) == 1
    print(
        f"serve: sbom --merge onto cyclonedx-py environment: {len(before['components'])} components, "
        f"{patches} patches on vllm and vllm-gaudi; a document without vllm-gaudi refused"
    )
