"""verify (passing, and failing for each reason) and diff (unified, and mbox through git am)."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from builders import BATCH, GAUDI_COMMIT, RUNNER, SAMPLER, make_site
from cookbooks import DOUBLING_PROOF
from trees import sources_args

ALWAYS_PASSES = "def check(trees) -> None:\n    pass\n"
BROKEN_PROOF = "def check(trees) -> None:\n    raise RuntimeError('proof is broken')\n"


def good_pack(cookbook) -> None:
    cookbook.fix(
        "doubling", {"vllm/sampler.py": (SAMPLER, SAMPLER.replace("return x", "return x * 2"))}, proof=DOUBLING_PROOF
    )
    first = RUNNER.replace("return 5\n", "return 55\n")
    cookbook.fix("runner-a", {"vllm_gaudi/runner.py": (RUNNER, first)}, title="Return 55 from f5")
    cookbook.fix("runner-b", {"vllm_gaudi/runner.py": (first, first.replace("return 9\n", "return 99\n"))})
    cookbook.profile(["doubling", "runner-a", "runner-b"])
    cookbook.lock()


def verify_json(cli, cookbook, *extra: str) -> tuple[int, dict]:
    r = cli("verify", "--json", *sources_args(cookbook), *extra)
    return r.exit_code, json.loads(r.stdout)


def test_verify_passes_and_writes_junit(cli, cookbook, tmp_path):
    good_pack(cookbook)
    junit = tmp_path / "verify.xml"
    code, out = verify_json(cli, cookbook, "--junit", str(junit))
    assert code == 0 and out["ok"], out
    by_fix = {r["fix"]: r for r in out["results"]}
    assert by_fix["doubling"]["proof"] == "demonstrated"
    assert by_fix["runner-a"]["proof"] == "none"
    assert all(r["applies"] and r["compiles"] and r["reverts"] for r in out["results"])
    assert 'tests="3" failures="0"' in junit.read_text()
    # The source trees were only read.
    assert (cookbook.sources["vllm"] / "vllm/sampler.py").read_text() == SAMPLER


def test_verify_reports_every_failure(cli, cookbook):
    good_pack(cookbook)
    # A proof that cannot tell the bug, one that errors, a stale lock and a placeholder why.
    cookbook.fix("no-bug-shown", {"vllm_gaudi/batch.py": (BATCH, BATCH + "# x\n")}, proof=ALWAYS_PASSES)
    cookbook.fix("broken-proof", {"vllm/executor.py": (None, None)}, proof=BROKEN_PROOF)
    executor = (cookbook.sources["vllm"] / "vllm/executor.py").read_text()
    cookbook.fix("broken-proof", {"vllm/executor.py": (executor, executor + "# y\n")}, proof=BROKEN_PROOF)
    cookbook.profile(["doubling", "runner-a", "runner-b", "no-bug-shown", "broken-proof"])
    cookbook.lock()
    lock = cookbook.root / "fixes/runner-b/v0.26.0.lock.json"
    data = json.loads(lock.read_text())
    data["files"]["vllm_gaudi/runner.py"]["after"] = "0" * 64
    lock.write_text(json.dumps(data))
    toml = cookbook.root / "fixes/runner-a/fix.toml"
    toml.write_text(re.sub(r'why = ".*"', 'why = "TODO"', toml.read_text()))
    code, out = verify_json(cli, cookbook)
    assert code == 1 and not out["ok"]
    by_fix = {r["fix"]: r for r in out["results"]}
    assert by_fix["doubling"]["failures"] == []
    assert by_fix["no-bug-shown"]["proof"] == "failed"
    assert any("passes on the pristine tree" in f for f in by_fix["no-bug-shown"]["failures"])
    assert by_fix["broken-proof"]["proof"] == "failed"
    assert any("proof is broken" in f for f in by_fix["broken-proof"]["failures"])
    assert any("locked fingerprints do not match" in f for f in by_fix["runner-b"]["failures"])
    assert any("'why' is missing or a placeholder" in f for f in by_fix["runner-a"]["failures"])


def test_verify_reports_a_change_that_no_longer_applies(cli, cookbook):
    good_pack(cookbook)
    (cookbook.sources["vllm-gaudi"] / "vllm_gaudi/runner.py").write_text(RUNNER.replace("return 5\n", "return 6\n"))
    code, out = verify_json(cli, cookbook)
    assert code == 1
    by_fix = {r["fix"]: r for r in out["results"]}
    assert not by_fix["runner-a"]["applies"]
    assert any("does not apply" in f for f in by_fix["runner-a"]["failures"])


def _git(repo: Path, *args: str) -> str:
    env = {
        "GIT_AUTHOR_NAME": "t",
        "GIT_AUTHOR_EMAIL": "t@t",
        "GIT_COMMITTER_NAME": "t",
        "GIT_COMMITTER_EMAIL": "t@t",
        "HOME": str(repo.parent),
        "PATH": "/usr/bin:/bin",
    }
    done = subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True, env=env)
    assert done.returncode == 0, done.stderr
    return done.stdout


def _upstream_repo(src: Path, dest: Path) -> Path:
    shutil.copytree(src, dest)
    _git(dest, "init", "-q")
    _git(dest, "add", "-A")
    _git(dest, "commit", "-qm", "release")
    return dest


@pytest.mark.skipif(shutil.which("git") is None, reason="needs git")
def test_mbox_applies_with_git_am_and_gives_apply_bytes(cli, cookbook, tmp_path):
    good_pack(cookbook)
    site = make_site(tmp_path)
    assert cli("apply", "--profile", "v0.26.0", "--site", str(site.path)).exit_code == 0
    for dist, path in (("vllm-gaudi", "vllm_gaudi/runner.py"), ("vllm", "vllm/sampler.py")):
        r = cli("diff", "--profile", "v0.26.0", "--format", "mbox", "--dist", dist)
        assert r.exit_code == 0
        mbox = tmp_path / f"{dist}.mbox"
        mbox.write_text(r.stdout)
        repo = _upstream_repo(cookbook.sources[dist], tmp_path / f"upstream-{dist}")
        _git(repo, "am", "-q", str(mbox))
        assert (repo / path).read_bytes() == site.read(path)
        log = _git(repo, "log", "--format=%s", "-n", "5")
        if dist == "vllm-gaudi":
            assert log.splitlines()[:2] == ["Fix runner-b", "Return 55 from f5"]
            assert f"base-commit: {GAUDI_COMMIT}" in r.stdout
            assert "[PATCH 1/2] Return 55 from f5" in r.stdout
            assert "\n---\n" in r.stdout and "\nForwarded: no\n" in r.stdout.split("\n---\n", 1)[1]


def test_unified_diff_applies_with_patch(cli, cookbook, tmp_path):
    good_pack(cookbook)
    r = cli("diff", "runner-a", "runner-b")
    assert r.exit_code == 0 and r.stdout.startswith("diff --git a/vllm_gaudi/runner.py b/vllm_gaudi/runner.py")
    tree = tmp_path / "tree"
    shutil.copytree(cookbook.sources["vllm-gaudi"], tree)
    done = subprocess.run(["git", "apply", "-p1", "-"], input=r.stdout, text=True, cwd=tree, capture_output=True)
    assert done.returncode == 0, done.stderr
    assert b"return 55\n" in (tree / "vllm_gaudi/runner.py").read_bytes()
    assert b"return 99\n" in (tree / "vllm_gaudi/runner.py").read_bytes()


def test_verify_without_sources_is_a_usage_error(cli, cookbook):
    good_pack(cookbook)
    r = cli("verify", f"--source=vllm={cookbook.sources['vllm']}")
    assert r.exit_code == 2 and "--source vllm-gaudi=DIR" in r.stderr


def test_diff_usage_errors(cli, cookbook):
    good_pack(cookbook)
    assert cli("diff").exit_code == 2
    r = cli("diff", "runer-a")
    assert r.exit_code == 2 and "did you mean 'runner-a'" in r.stderr


def test_lock_refuses_a_change_that_no_longer_applies(cli, cookbook):
    good_pack(cookbook)
    before = (cookbook.root / "fixes/runner-a/v0.26.0.lock.json").read_text()
    (cookbook.sources["vllm-gaudi"] / "vllm_gaudi/runner.py").write_text(RUNNER.replace("return 5\n", "return 6\n"))
    r = cli("lock", *sources_args(cookbook))
    assert r.exit_code == 1 and "runner-a" in r.stderr and "hunk #1" in r.stderr
    assert (cookbook.root / "fixes/runner-a/v0.26.0.lock.json").read_text() == before


def test_mbox_carries_git_mime_headers_and_survives_a_mail_parser(cli, cookbook):
    """A non-ASCII title and context line (the v0.26.0 pack has an em dash in one) read back intact."""
    import mailbox

    text = RUNNER.replace("def f5():\n", "def f5():  # résumé — kept\n")
    (cookbook.sources["vllm-gaudi"] / "vllm_gaudi/runner.py").write_text(text)
    cookbook.fix(
        "em-dash", {"vllm_gaudi/runner.py": (text, text.replace("return 5\n", "return 55\n"))}, title="Fix f5 — naïvely"
    )
    cookbook.profile(["em-dash"])
    cookbook.lock()
    r = cli("diff", "em-dash", "--format", "mbox")
    assert r.exit_code == 0
    for header in ("MIME-Version: 1.0", "Content-Type: text/plain; charset=UTF-8", "Content-Transfer-Encoding: 8bit"):
        assert header in r.stdout
    path = cookbook.root / "x.mbox"
    path.write_bytes(r.stdout.encode())
    (message,) = mailbox.mbox(str(path))
    from email.header import decode_header, make_header

    assert str(make_header(decode_header(message["Subject"]))) == "[PATCH] Fix f5 — naïvely"
    assert "# résumé — kept" in message.get_payload(decode=True).decode(message.get_content_charset())
