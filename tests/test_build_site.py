"""build-site: a site laid out as the image installs both packages, from a wheel and a git repo."""

from __future__ import annotations

import base64
import hashlib
import importlib.util
import json
import os
import subprocess
import zipfile
from pathlib import Path

import pytest
from builders import SAMPLER
from click.testing import CliRunner

from fixpack.cli import main
from fixpack.commands.maintain import build_site as sitebuild

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
    for args in (["init", "-q"], ["add", "-A"], ["commit", "-qm", "release"], ["tag", "v0.26.0"]):
        _git(repo, *args)
    return repo, _git(repo, "rev-parse", "HEAD")


def _git(repo: Path, *args: str) -> str:
    env = {
        **os.environ,
        "GIT_AUTHOR_NAME": "t",
        "GIT_AUTHOR_EMAIL": "t@t",
        "GIT_COMMITTER_NAME": "t",
        "GIT_COMMITTER_EMAIL": "t@t",
    }
    return subprocess.run(["git", *args], cwd=repo, env=env, check=True, capture_output=True, text=True).stdout.strip()


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


# --- checks before anything is downloaded or installed ---------------------------------------


@pytest.fixture
def no_steps(monkeypatch: pytest.MonkeyPatch) -> list[list[str]]:
    """Record every clone / pip step (and stop it): a check that fails must come before any of them."""
    calls: list[list[str]] = []

    def record(args: list[str], *_a: object, **_k: object) -> str:
        calls.append(args)
        raise AssertionError(f"a step ran before the checks failed: {args}")

    monkeypatch.setattr(sitebuild, "_run", record)
    monkeypatch.setenv("PIP_INDEX_URL", "http://127.0.0.1:9/nowhere")  # a download could not succeed anyway
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    return calls


def _args(site: Path, repo: Path, wheel: Path) -> list[str]:
    return ["build-site", str(site), "--vllm-gaudi", str(repo), "--vllm-wheel", str(wheel), "--ref", "v0.26.0"]


def _leftovers(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.name == "site" or ".fixpack-build-" in p.name)


@pytest.mark.parametrize(
    "case, code, says",
    [
        ("site is a file", 2, "is not a folder"),
        ("not a repo", 2, "is not a git repository"),
        ("subfolder of a repo", 2, "is not a git repository"),
        ("no such path", 2, "no such folder or git bundle, and not a git URL"),
        ("missing ref", 2, "has no commit v9.9.9"),
        ("unreachable URL", 3, "cannot be reached"),
        ("wheel of another version", 2, "the profile pins vllm 0.26.0"),
        ("wheel not a zip", 2, "not a zip file"),
        ("no git", 3, "git is not on PATH"),
    ],
)
def test_build_site_checks_inputs_before_any_download(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, no_steps: list[list[str]], case: str, code: int, says: str
):
    repo, _ = _gaudi_repo(tmp_path)
    (tmp_path / "plain").mkdir()
    site = tmp_path / "out" / "site"
    args = {"--vllm-gaudi": str(repo)}
    ref: list[str] = ["--ref", "v0.26.0"]
    if case == "site is a file":
        site.parent.mkdir()
        site.write_text("")
    elif case == "not a repo":
        args["--vllm-gaudi"] = str(tmp_path / "plain")
    elif case == "subfolder of a repo":
        args["--vllm-gaudi"] = str(repo / "vllm_gaudi")
    elif case == "no such path":
        args["--vllm-gaudi"] = str(tmp_path / "nowhere")
    elif case == "missing ref":
        ref = ["--ref", "v9.9.9"]
    elif case == "unreachable URL":
        args["--vllm-gaudi"] = (tmp_path / "nowhere.git").as_uri()
    elif case == "wheel of another version":
        wheel = _wheel(tmp_path)
        args["--vllm-wheel"] = str(wheel.rename(tmp_path / "vllm-0.25.0-py3-none-any.whl"))
    elif case == "wheel not a zip":
        (tmp_path / "vllm-0.26.0-py3-none-any.whl").write_text("not a zip")
        args["--vllm-wheel"] = str(tmp_path / "vllm-0.26.0-py3-none-any.whl")
    elif case == "no git":
        monkeypatch.setenv("PATH", str(tmp_path / "plain"))
    r = CliRunner().invoke(main, ["build-site", str(site), *[x for kv in args.items() for x in kv], *ref])
    assert r.exit_code == code, r.output
    assert says in r.stderr
    errors = [line for line in r.stderr.splitlines() if not line.startswith("fixpack: checking ")]
    assert errors[0].startswith("fixpack: error: ") and "Traceback" not in r.output
    assert no_steps == []  # nothing cloned, downloaded or installed
    assert not list((tmp_path / "out").glob(".site.fixpack-build-*"))
    if case != "site is a file":
        assert not (tmp_path / "out").exists()  # not even the parent folder


def test_build_site_help_says_what_it_downloads_and_what_comes_next():
    r = CliRunner().invoke(main, ["build-site", "--help"])
    assert r.exit_code == 0
    text = " ".join(r.output.split())
    assert "about 300 MB" in text and "unless --vllm-wheel" in text
    assert "[build-system] requires" in text and "private temporary folder" in text
    assert "python3 fixes/apply_all.py --profile v0.26.0 --site SITE [OPT-IN ...]" in text
    assert "fixpack apply --site SITE" not in text  # that needs --profile: it did not work


def test_build_site_ends_with_a_next_command_that_names_this_cookbook(tmp_path: Path):
    wheel = _wheel(tmp_path)
    repo, _ = _gaudi_repo(tmp_path)
    site = tmp_path / "site"
    r = CliRunner().invoke(main, _args(site, repo, wheel))
    assert r.exit_code == 0, r.output
    assert any("installing vllm-0.26.0-py3-none-any.whl (0 MB)" in line for line in r.stderr.splitlines())
    (nxt,) = [
        line.split() for line in r.stdout.splitlines()
    ]  # the steps are on stderr, the next command alone on stdout
    # this test's vllm-gaudi is a commit of its own, not the one the repository's profile pins: the
    # apply would refuse it as the image not matching, and the next command says so
    assert "the image does not match profile v0.26.0: vllm-gaudi is version 0.26.0, commit" in r.stderr
    assert nxt[0] == "next:" and nxt[-5:] == ["--profile", "v0.26.0", "--site", str(site), "--allow-unpinned"]
    script = Path(nxt[2])
    assert script.name == "apply_all.py" and (script if script.is_absolute() else Path.cwd() / script).is_file()
    assert not list(tmp_path.glob(".site.fixpack-build-*"))


def test_build_site_replaces_an_empty_folder(tmp_path: Path):
    wheel = _wheel(tmp_path)
    repo, _ = _gaudi_repo(tmp_path)
    site = tmp_path / "site"
    site.mkdir()
    r = CliRunner().invoke(main, _args(site, repo, wheel))
    assert r.exit_code == 0, r.output
    assert (site / "vllm/sampler.py").read_text() == SAMPLER
    assert oct(site.stat().st_mode & 0o777) != oct(0o700)  # not the private mode of a temporary folder


# --- a failing build leaves nothing; its error says why --------------------------------------

BROKEN_SETUP = (
    "import sys\n"
    "print('configuration error: `project.license` must be valid exactly by one definition', file=sys.stderr)\n"
    "for i in range(60):\n"
    "    print(f'    - keys: schema dump line {i}', file=sys.stderr)\n"
    "raise SystemExit('ValueError: invalid pyproject.toml config: `project.license`.')\n"
)


def test_a_failed_build_leaves_nothing_says_why_and_a_retry_works(tmp_path: Path):
    wheel = _wheel(tmp_path)
    repo, _ = _gaudi_repo(tmp_path)
    good = (repo / "setup.py").read_text()
    _git(repo, "tag", "-d", "v0.26.0")
    (repo / "setup.py").write_text(BROKEN_SETUP)
    _git(repo, "commit", "-qam", "broken")
    _git(repo, "tag", "v0.26.0-broken")
    (repo / "setup.py").write_text(good)
    _git(repo, "commit", "-qam", "fixed")
    _git(repo, "tag", "v0.26.0")
    site = tmp_path / "out" / "site"
    base = ["build-site", str(site), "--vllm-gaudi", str(repo), "--vllm-wheel", str(wheel)]

    r = CliRunner().invoke(main, [*base, "--ref", "v0.26.0-broken"])
    assert r.exit_code == 3, r.output
    assert "\nfixpack: error: building and installing vllm-gaudi failed" in r.stderr
    # pip's own lines and the build's: why, not the last lines of the dump
    assert "configuration error: `project.license` must be valid exactly by one definition" in r.stderr
    assert "ValueError: invalid pyproject.toml config: `project.license`." in r.stderr
    assert "error: subprocess-exited-with-error" in r.stderr
    assert "schema dump line 59" not in r.stderr
    assert "Traceback" not in r.output
    assert not (tmp_path / "out").exists()  # no site, no temporary folder, not even the parent made for it

    r = CliRunner().invoke(main, [*base, "--ref", "v0.26.0"])
    assert r.exit_code == 0, r.output
    assert (site / "vllm/sampler.py").read_text() == SAMPLER
    assert list(site.glob("vllm_gaudi-0.26.0*.*-info"))
    assert _leftovers(site.parent) == ["site"]


def test_an_interrupted_build_leaves_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    wheel = _wheel(tmp_path)
    repo, _ = _gaudi_repo(tmp_path)
    site = tmp_path / "site"
    run = sitebuild._run

    def ctrl_c_at_pip(args: list[str], *a: object, **k: object) -> str:
        if "pip" in args:
            raise KeyboardInterrupt
        return run(args, *a, **k)

    monkeypatch.setattr(sitebuild, "_run", ctrl_c_at_pip)
    from fixpack.cookbook import ENGINE_ROOT
    from fixpack.cookbook.catalog import Catalog

    profile = Catalog.load(ENGINE_ROOT).profile("v0.26.0")
    lines = []
    with pytest.raises(KeyboardInterrupt):
        for line in sitebuild.build(profile, site, str(repo), wheel, "v0.26.0"):
            lines.append(line)
    assert any(line.startswith("cloned and checked out v0.26.0") for line in lines)
    assert _leftovers(tmp_path) == []


# --- vllm-gaudi's declared build requirements, installed privately ---------------------------

PROBE = "fixpack_buildreq_probe"


def _probe_wheel(folder: Path) -> Path:
    """A wheel of a build requirement that no environment has: only a find-links folder does."""
    folder.mkdir()
    path = folder / f"{PROBE}-1.0-py3-none-any.whl"
    files = {
        f"{PROBE}.py": b"MARK = 'from the private build requirements'\n",
        f"{PROBE}-1.0.dist-info/METADATA": f"Metadata-Version: 2.1\nName: {PROBE}\nVersion: 1.0\n".encode(),
        f"{PROBE}-1.0.dist-info/WHEEL": (
            b"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
        ),
    }
    record = []
    with zipfile.ZipFile(path, "w") as zf:
        for name, data in files.items():
            zf.writestr(name, data)
            digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
            record.append(f"{name},sha256={digest},{len(data)}")
        record.append(f"{PROBE}-1.0.dist-info/RECORD,,")
        zf.writestr(f"{PROBE}-1.0.dist-info/RECORD", "\n".join(record) + "\n")
    return path


def _repo_requiring_probe(tmp: Path) -> Path:
    """A vllm-gaudi-like repo whose pyproject declares the probe as a build requirement, which setup.py imports."""
    repo, _ = _gaudi_repo(tmp)
    (repo / "pyproject.toml").write_text(
        f'[build-system]\nrequires = ["{PROBE}>=1"]\nbuild-backend = "setuptools.build_meta"\n'
    )
    (repo / "setup.py").write_text(
        f"import {PROBE}\n"
        "from setuptools import setup\n"
        "setup(name='vllm_gaudi', packages=['vllm_gaudi'], use_scm_version={'write_to': 'vllm_gaudi/_version.py'})\n"
    )
    _git(repo, "tag", "-d", "v0.26.0")
    _git(repo, "add", "-A")
    _git(repo, "commit", "-qm", "declare a build requirement")
    _git(repo, "tag", "v0.26.0")
    return repo


@pytest.fixture
def offline(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """pip sees no index, only a find-links folder the test fills."""
    links = tmp_path / "links"
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    monkeypatch.setenv("PIP_FIND_LINKS", str(links))
    return links


def test_build_site_installs_the_declared_build_requirements_privately(tmp_path: Path, offline: Path):
    assert importlib.util.find_spec(PROBE) is None
    _probe_wheel(offline)
    wheel = _wheel(tmp_path)
    repo = _repo_requiring_probe(tmp_path)
    site = tmp_path / "site"
    r = CliRunner().invoke(main, _args(site, repo, wheel))
    assert r.exit_code == 0, r.output
    assert f"{PROBE}>=1 (not installed here)" in r.stderr
    assert "into a private folder" in r.stderr and "not into this environment" in r.stderr
    assert list(site.glob("vllm_gaudi-0.26.0*.*-info"))
    assert not list(site.glob(f"{PROBE}*"))  # a build requirement, not part of the site
    assert importlib.util.find_spec(PROBE) is None  # nor installed into this environment
    assert _leftovers(tmp_path) == ["site"]


def test_a_build_requirement_pip_cannot_get_fails_with_pips_reason(tmp_path: Path, offline: Path):
    offline.mkdir()  # empty: the probe is nowhere
    wheel = _wheel(tmp_path)
    repo = _repo_requiring_probe(tmp_path)
    site = tmp_path / "site"
    r = CliRunner().invoke(main, _args(site, repo, wheel))
    assert r.exit_code == 3, r.output
    assert "\nfixpack: error: installing vllm-gaudi's build requirements failed" in r.stderr
    assert f"ERROR: Could not find a version that satisfies the requirement {PROBE}>=1" in r.stderr
    assert _leftovers(tmp_path) == []


def test_why_picks_the_lines_that_say_why():
    dump = "\n".join(f"          - keys: line {i}" for i in range(80))
    output = (
        "Processing ./vllm-gaudi\n"
        "  Preparing metadata (pyproject.toml): finished with status 'error'\n"
        "  error: subprocess-exited-with-error\n\n"
        "  × Preparing metadata (pyproject.toml) did not run successfully.\n"
        "  │ exit code: 1\n"
        "  ╰─> [93 lines of output]\n"
        "      configuration error: `project.license` must be valid exactly by one definition (2 matches found):\n"
        f"{dump}\n"
        '        File "/x/setuptools/config/pyprojecttoml.py", line 72, in read_configuration\n'
        "          raise ValueError(f'{error}')\n"
        "      ValueError: invalid pyproject.toml config: `project.license`.\n"
        "      configuration error: `project.license` must be valid exactly by one definition (2 matches found):\n"
        f"{dump}\n"
        "      [end of output]\n\n"
        "  note: This error originates from a subprocess, and is likely not a problem with pip.\n"
        "error: metadata-generation-failed\n\n"
        "× Encountered error while generating package metadata.\n"
        "╰─> See above for output.\n\n"
        "note: This is an issue with the package mentioned above, not pip.\n"
        "hint: See above for details.\n"
    )
    lines = sitebuild.why(output).splitlines()
    assert "      ValueError: invalid pyproject.toml config: `project.license`." in lines
    assert sum("configuration error" in line for line in lines) == 1
    assert "error: metadata-generation-failed" in lines and lines[-1] == "hint: See above for details."
    assert not any("keys: line" in line or "raise ValueError" in line for line in lines)
    assert len(lines) < 15
    fatal = "fatal: repository '/nowhere' does not exist"
    assert sitebuild.why(f"Cloning into 'x'...\n{fatal}\n") == fatal
    assert sitebuild.why("a\nb\nc\n") == "a\nb\nc"  # nothing says error: the last lines


def test_build_site_downloads_the_pinned_wheel_after_building_vllm_gaudi(tmp_path: Path, offline: Path):
    offline.mkdir()
    _wheel(offline)  # what `pip download vllm==0.26.0` finds here, offline
    repo, _ = _gaudi_repo(tmp_path)
    site = tmp_path / "site"
    r = CliRunner().invoke(main, ["build-site", str(site), "--vllm-gaudi", str(repo), "--ref", "v0.26.0"])
    assert r.exit_code == 0, r.output
    out = r.stderr
    assert "downloading vllm==0.26.0 from the package index (a ~300 MB wheel" in out
    assert "downloaded vllm-0.26.0-py3-none-any.whl (0 MB)" in out
    assert out.index("installed vllm-gaudi") < out.index("downloading vllm==0.26.0")  # the cheap part first
    assert (site / "vllm/sampler.py").read_text() == SAMPLER
    assert _leftovers(tmp_path) == ["site"]


def test_build_site_says_the_version_it_built_and_a_next_command_that_applies(
    tmp_path: Path, cookbook, monkeypatch: pytest.MonkeyPatch
):
    """Issue 57: another --ref built another version, but the steps said the pinned one. Each step
    says what the ref gave; a build at the pinned commit ends with a plain apply (the cookbook here
    pins this repository's own commit)."""
    wheel = _wheel(tmp_path)
    repo, head = _gaudi_repo(tmp_path)
    (repo / "vllm_gaudi" / "later.py").write_text("")
    _git(repo, "add", "-A")
    _git(repo, "commit", "-qm", "later")
    _git(repo, "tag", "v0.27.0rc0")
    cookbook.fix("sampler-fix", {"vllm/sampler.py": (SAMPLER, SAMPLER.replace("return x", "return x * 2"))})
    cookbook.profile(["sampler-fix"], commits={"vllm-gaudi": [head], "vllm": ["ffd46bfab"]})
    cookbook.lock()
    later = CliRunner().invoke(main, [*_args(tmp_path / "later", repo, wheel)[:-1], "v0.27.0rc0"])
    assert later.exit_code == 0, later.output
    assert "installed vllm-gaudi 0.27.0rc0 in " in later.stderr and "vllm-gaudi 0.26.0" not in later.stderr
    assert "the image does not match profile v0.26.0: vllm-gaudi is version 0.27.0rc0" in later.stderr
    assert later.stdout.rstrip().endswith("--allow-unpinned")
    pinned = CliRunner().invoke(main, _args(tmp_path / "pinned", repo, wheel))
    assert pinned.exit_code == 0, pinned.output
    assert "installed vllm-gaudi 0.26.0 in " in pinned.stderr and "does not match" not in pinned.stderr
    nxt = pinned.stdout.split()
    assert nxt[-4:] == ["--profile", "v0.26.0", "--site", str(tmp_path / "pinned")]
    applied = CliRunner().invoke(main, ["apply", "--profile", "v0.26.0", "--site", str(tmp_path / "pinned")])
    assert applied.exit_code == 0, applied.output


def test_build_site_takes_a_git_bundle_as_vllm_gaudi_git_does(tmp_path: Path):
    """Issue 57: --vllm-gaudi refused the bundle the tests' VLLM_GAUDI_GIT takes."""
    wheel = _wheel(tmp_path)
    repo, head = _gaudi_repo(tmp_path)
    bundle = tmp_path / "vllm-gaudi.bundle"
    _git(repo, "bundle", "create", str(bundle), "--all")
    site = tmp_path / "site"
    r = CliRunner().invoke(main, _args(site, bundle, wheel))
    assert r.exit_code == 0, r.output
    assert f"vllm-gaudi: {bundle} has v0.26.0" in r.stderr
    assert list(site.glob("vllm_gaudi-0.26.0*.*-info"))
