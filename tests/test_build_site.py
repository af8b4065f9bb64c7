"""build-site: a site laid out as the image installs both packages, from a wheel and a git repo."""

from __future__ import annotations

import base64
import hashlib
import importlib.util
import json
import subprocess
import zipfile
from pathlib import Path

import pytest
from builders import SAMPLER
from click.testing import CliRunner

from fixpack.cli import main

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("setuptools_scm") is None, reason="vllm-gaudi's build needs setuptools-scm"
)


def _wheel(tmp: Path) -> Path:
    """A minimal vllm wheel: one module and its dist-info."""
    path = tmp / "vllm-0.26.0-py3-none-any.whl"
    files = {"vllm/__init__.py": b"", "vllm/sampler.py": SAMPLER.encode()}
    meta = {
        "vllm-0.26.0.dist-info/METADATA": b"Metadata-Version: 2.1\nName: vllm\nVersion: 0.26.0\n",
        "vllm-0.26.0.dist-info/WHEEL": (
            b"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
        ),
    }
    record = []
    with zipfile.ZipFile(path, "w") as zf:
        for name, data in {**files, **meta}.items():
            zf.writestr(name, data)
            digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
            record.append(f"{name},sha256={digest},{len(data)}")
        record.append("vllm-0.26.0.dist-info/RECORD,,")
        zf.writestr("vllm-0.26.0.dist-info/RECORD", "\n".join(record) + "\n")
    return path


def _gaudi_repo(tmp: Path) -> tuple[Path, str]:
    """A git repository of a vllm_gaudi package built with setuptools-scm, tagged v0.26.0."""
    repo = tmp / "vllm-gaudi"
    (repo / "vllm_gaudi").mkdir(parents=True)
    (repo / "vllm_gaudi/__init__.py").write_text("")
    (repo / "setup.py").write_text(
        "from setuptools import setup\n"
        "setup(name='vllm_gaudi', packages=['vllm_gaudi'], use_scm_version={'write_to': 'vllm_gaudi/_version.py'})\n"
    )
    env = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@t"}
    for args in (["init", "-q"], ["add", "-A"], ["commit", "-qm", "release"], ["tag", "v0.26.0"]):
        subprocess.run(["git", *args], cwd=repo, env=env, check=True, capture_output=True)
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=repo, capture_output=True, text=True, check=True)
    return repo, head.stdout.strip()


def test_build_site_lays_out_both_distributions(tmp_path: Path):
    wheel = _wheel(tmp_path)
    repo, head = _gaudi_repo(tmp_path)
    site = tmp_path / "site"
    r = CliRunner().invoke(
        main, ["build-site", str(site), "--vllm-gaudi", str(repo), "--vllm-wheel", str(wheel), "--ref", "v0.26.0"]
    )
    assert r.exit_code == 0, r.output
    assert (site / "vllm/sampler.py").read_text() == SAMPLER
    assert list(site.glob("vllm_gaudi-0.26.0*.*-info"))  # an old setuptools leaves egg-info: found all the same
    assert not (repo / "vllm_gaudi/_version.py").exists()  # the build ran in a clone, not in the checkout
    st = CliRunner().invoke(main, ["status", "--site", str(site), "--json"])
    dists = {d["name"]: d for d in json.loads(st.stdout)["distributions"]}
    assert dists["vllm"]["version"] == "0.26.0"
    assert dists["vllm-gaudi"]["version"] == "0.26.0"
    assert dists["vllm-gaudi"]["commit"] is not None and head.startswith(dists["vllm-gaudi"]["commit"])


def test_build_site_refuses_a_non_empty_folder(tmp_path: Path):
    (tmp_path / "site").mkdir()
    (tmp_path / "site" / "x").write_text("")
    r = CliRunner().invoke(main, ["build-site", str(tmp_path / "site"), "--vllm-gaudi", "nowhere"])
    assert r.exit_code == 2 and "not empty" in r.stderr
