"""From a fix to what upstream takes: the mbox's commits (subject, why, sign-off; the cookbook's facts
below the --- line), the identities it is signed with, --format pr, and [upstream] as DEP-3's fields.

The last test applies the real pack's mbox to a clean v0.26.0 checkout of vllm-gaudi (a git clone in
FIXPACK_SRC_VLLM_GAUDI, as .ci/run makes it); it is skipped, saying why, without one.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from builders import GAUDI_COMMIT, REPO, RUNNER, SAMPLER

from fixpack.commands.maintain.upstream.diff import absolute_figures, wrap
from fixpack.cookbook import tomlfile
from fixpack.cookbook.catalog import Catalog
from fixpack.models import SUBJECT_MAX

AUTHOR = "A <a@example.org>"
# A number with a unit (time, rate, size, share, speed-up): what upstream's rules call an absolute
# performance figure. Written here apart from fixpack's own pattern, which this checks.
FIGURE = re.compile(r"\b\d+(?:\.\d+)?\s?(?:ms|s|%|tokens/s|tok/s|GB|GiB|MB|x)(?![\w/])", re.IGNORECASE)
# The cookbook's own fields, and the old message's trailers: never in a commit message.
COOKBOOK_FIELD = re.compile(
    r"^(?:Fixpack-[\w-]+|Upstream-Status|Upstream-Note|Verified-On|Forwarded|Bug|Origin|Applied-Upstream"
    r"|Regressed-In|Proof|Note):",
    re.MULTILINE,
)
NEW_UPSTREAM = """forwarded = "https://example.org/upstream/pull/7"
bug = ["example/upstream#3", "https://example.org/upstream/issues/4"]
note = "Reviewers asked for a test; the maintainers' own remark."
"""


def _pack(cookbook, title: str = "Return 55 from f5", why: str = "") -> None:
    cookbook.fix(
        "runner-a", {"vllm_gaudi/runner.py": (RUNNER, RUNNER.replace("return 5\n", "return 55\n"))}, title=title
    )
    cookbook.fix("sampler-b", {"vllm/sampler.py": (SAMPLER, SAMPLER.replace("return x\n", "return x * 2\n"))})
    toml = cookbook.root / "fixes/runner-a/fix.toml"
    text = toml.read_text().replace('status = "pending"\n', NEW_UPSTREAM)
    if why:
        text = re.sub(r'(?m)^why = ".*"$', f"why = {json.dumps(why)}", text)
    toml.write_text(text)
    cookbook.profile(["runner-a", "sampler-b"])
    cookbook.lock()


def _git(repo: Path, *args: str, stdin: str | None = None) -> str:
    done = subprocess.run(
        ["git", "-C", str(repo), "-c", "user.name=Committer", "-c", "user.email=c@example.org", *args],
        capture_output=True, text=True, input=stdin,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    return done.stdout


def _upstream(src: Path, dest: Path) -> Path:
    shutil.copytree(src, dest)
    _git(dest, "init", "-q")
    _git(dest, "add", "-A")
    _git(dest, "commit", "-qm", "release")
    return dest


def _commits(repo: Path, since: str) -> list[dict[str, str]]:
    """Each commit after ``since``, as git log shows it: author, subject, message, sign-offs."""
    fmt = "%an <%ae>%x00%s%x00%B%x00%(trailers:key=Signed-off-by,valueonly,separator=%x02)%x01"
    out = _git(repo, "log", "--reverse", f"--format={fmt}", f"{since}..HEAD")
    rows = []
    for record in out.split("\x01"):
        if record.strip("\n"):
            author, subject, body, signoffs = record.lstrip("\n").split("\x00")
            rows.append({"author": author, "subject": subject, "body": body, "signoffs": signoffs.strip()})
    return rows


def _check_commit(c: dict[str, str], author: str = AUTHOR) -> None:
    assert c["author"] == author
    assert c["signoffs"].split("\x02") == [author], c["signoffs"]
    assert len(c["subject"]) <= SUBJECT_MAX, c["subject"]
    assert not COOKBOOK_FIELD.search(c["body"]), c["body"]
    assert not FIGURE.search(c["body"]), FIGURE.search(c["body"])
    assert all(len(line) <= 72 or " " not in line for line in c["body"].splitlines()), c["body"]


# -- the mbox: its commits, and who signs them ----------------------------------------------------


@pytest.mark.skipif(shutil.which("git") is None, reason="needs git")
def test_mbox_commits_carry_subject_why_and_signoff_and_nothing_of_the_cookbook(cli, cookbook, tmp_path):
    _pack(cookbook)
    r = cli("diff", "--profile", "v0.26.0", "--format", "mbox", "--dist", "vllm-gaudi", "--signoff", "--author", AUTHOR)
    assert r.exit_code == 0, r.stderr
    message, below = r.stdout.split("\n---\n", 1)
    assert message.endswith("\n\nSigned-off-by: A <a@example.org>") and "fixpack@localhost" not in r.stdout
    # The cookbook's facts, below the line: DEP-3's names, the fix, how it was verified, the note.
    for line in (
        "Fixpack-Fix: runner-a (profile v0.26.0, release v0.26.0)",
        "Forwarded: https://example.org/upstream/pull/7",
        "Bug: example/upstream#3",
        "Bug: https://example.org/upstream/issues/4",
        "Proof: none: test fix",
        "Verified-On: tests",
        "Note: Reviewers asked for a test; the maintainers' own remark.",
    ):
        assert f"\n{line}\n" in below.split("\ndiff --git ")[0], line
    assert not COOKBOOK_FIELD.search(message)
    repo = _upstream(cookbook.sources["vllm-gaudi"], tmp_path / "upstream")
    _git(repo, "am", "-q", stdin=r.stdout)
    (commit,) = _commits(repo, "HEAD~1")
    _check_commit(commit)
    assert commit["subject"] == "Return 55 from f5"
    assert "Because runner-a is broken" in commit["body"]


def test_signoff_and_author_come_from_git_without_author(cli, cookbook, git_identity):
    _pack(cookbook)
    r = cli("diff", "runner-a", "--format", "mbox", "--signoff")
    assert r.exit_code == 0, r.stderr
    assert "\nFrom: fixpack tests <tests@fixpack.invalid>\n" in r.stdout
    assert "\nSigned-off-by: fixpack tests <tests@fixpack.invalid>\n---\n" in r.stdout


@pytest.mark.parametrize("signoff", [False, True])
def test_no_identity_is_a_usage_error_never_a_made_up_address(cli, cookbook, tmp_path, monkeypatch, signoff):
    _pack(cookbook)
    empty = tmp_path / "empty-gitconfig"
    empty.write_text("")
    monkeypatch.setenv("GIT_CONFIG_GLOBAL", str(empty))
    monkeypatch.setenv("GIT_CONFIG_NOSYSTEM", "1")
    monkeypatch.chdir(tmp_path)  # no repository, so no local config either
    r = cli("diff", "runner-a", "--format", "mbox", *(["--signoff"] if signoff else []))
    assert r.exit_code == 2 and r.stdout == ""
    assert "--author 'Name <email>'" in r.stderr and "user.name" in r.stderr
    # --author alone is enough, and is what the sign-off is
    r = cli("diff", "runner-a", "--format", "mbox", "--author", AUTHOR, *(["--signoff"] if signoff else []))
    assert r.exit_code == 0 and ("Signed-off-by: A <a@example.org>" in r.stdout) == signoff


def test_a_signoff_that_is_not_the_author_is_refused(cli, cookbook, monkeypatch):
    """git's author identity (GIT_AUTHOR_*) is another person than its committer identity (user.*),
    whom a sign-off would name: refused with --signoff, and --author settles it."""
    _pack(cookbook)
    monkeypatch.setenv("GIT_AUTHOR_NAME", "Other Person")
    monkeypatch.setenv("GIT_AUTHOR_EMAIL", "other@example.org")
    r = cli("diff", "runner-a", "--format", "mbox", "--signoff")
    assert r.exit_code == 2 and r.stdout == ""
    assert "Other Person <other@example.org>" in r.stderr and "fixpack tests <tests@fixpack.invalid>" in r.stderr
    assert "not the author's is refused" in r.stderr
    r = cli("diff", "runner-a", "--format", "mbox")  # without a sign-off: git's author identity
    assert r.exit_code == 0 and "\nFrom: Other Person <other@example.org>\n" in r.stdout
    r = cli("diff", "runner-a", "--format", "mbox", "--signoff", "--author", AUTHOR)
    assert r.exit_code == 0 and "\nSigned-off-by: A <a@example.org>\n" in r.stdout


@pytest.mark.parametrize("author", ["nobody", "<a@example.org>", "A <no-at-sign>"])
def test_an_author_that_is_not_an_identity_is_refused(cli, cookbook, author):
    _pack(cookbook)
    r = cli("diff", "runner-a", "--format", "mbox", "--author", author)
    assert r.exit_code == 2 and "'Name <email>'" in r.stderr


def test_signoff_goes_with_mbox_only(cli, cookbook):
    _pack(cookbook)
    for fmt in ("unified", "pr"):
        r = cli("diff", "runner-a", "--format", fmt, "--signoff")
        assert r.exit_code == 2 and "--signoff" in r.stderr


def test_a_title_over_72_characters_needs_a_subject(cli, cookbook):
    long_title = "Return 55 from f5 " + "and explain at length why that is the right value " * 2
    _pack(cookbook, title=long_title.strip())
    r = cli("diff", "runner-a", "--format", "mbox", "--author", AUTHOR)
    assert r.exit_code == 2 and "subject" in r.stderr and "runner-a" in r.stderr
    toml = cookbook.root / "fixes/runner-a/fix.toml"
    toml.write_text(re.sub(r"(?m)^(title = .*\n)", r'\1subject = "Return 55 from f5"\n', toml.read_text()))
    r = cli("diff", "runner-a", "--format", "mbox", "--author", AUTHOR)
    assert r.exit_code == 0 and "\nSubject: [PATCH] Return 55 from f5\n" in r.stdout
    toml.write_text(toml.read_text().replace('subject = "Return 55 from f5"', f"subject = {json.dumps(long_title)}"))
    r = cli("list")
    assert r.exit_code == 2 and "subject must be one line of at most 72" in r.stderr


def test_absolute_figures_are_named_on_stderr(cli, cookbook):
    _pack(cookbook, why="f5 returned 5, which cost 1.6 ms per call and 43% of the step: it must return 55 instead.")
    r = cli("diff", "runner-a", "--format", "mbox", "--author", AUTHOR)
    assert r.exit_code == 0
    assert "absolute performance figures" in r.stderr and "'1.6 ms'" in r.stderr and "'43%'" in r.stderr


@pytest.mark.parametrize(
    "text, figures",
    [
        (
            "315 tokens/s, 1.6 ms and 43% and a 2.5x speed-up on 12 GB",
            ["315 tokens/s", "1.6 ms", "43%", "2.5x", "12 GB"],
        ),
        ("blocks of 1152 tokens, 8 of 64 experts, v0.26.0, 2**32, torch 2.13.0+cpu, 0x1f", []),
    ],
)
def test_absolute_figures(text, figures):
    assert absolute_figures(text) == figures


def test_wrap_fills_prose_and_list_items_to_72():
    why = (
        "First paragraph, " + "long words again " * 10 + "\nstill the first.\n\n"
        "Lead-in:\n- an item " + "that runs on " * 10 + "\n  continued\n- a second item\nProse after the list.\n\n"
        "    verbatim line that stays exactly as it is, however long it happens to run on and on\n\n"
        "---not a separator once wrapped\ndiff -u is not a patch either"
    )
    out = wrap(why)
    lines = out.splitlines()
    assert all(len(ln) <= 72 for ln in lines if not ln.startswith("    "))
    assert "    verbatim line that stays exactly as it is, however long it happens to run on and on" in lines
    assert "- a second item" in lines and "Prose after the list." in lines
    assert lines[lines.index("Lead-in:") + 1].startswith("- an item that runs on")
    assert lines[lines.index("Lead-in:") + 2].startswith("  ")
    assert not any(re.match(r"(?:---|diff -|From )", ln) for ln in lines)


# -- --format pr ----------------------------------------------------------------------------------


def test_format_pr_prints_title_and_body_per_fix(cli, cookbook):
    _pack(cookbook)
    r = cli("diff", "--profile", "v0.26.0", "--format", "pr")
    assert r.exit_code == 0, r.stderr
    parts = r.stdout.split("===== PR ")[1:]
    assert [p.split(":", 1)[1].split(",")[0].strip() for p in parts] == ["runner-a", "sampler-b"]
    runner = parts[0]
    assert runner.startswith(f"1/2: runner-a, for vllm-gaudi at {GAUDI_COMMIT} =====\n")
    assert "\nTitle:\nReturn 55 from f5\n\nBody:\n## What\n" in runner
    for heading in ("## What", "## Why", "## How it was tested", "## Not tested"):
        assert f"\n{heading}\n" in runner, heading
    assert "- `vllm_gaudi/runner.py` (+1 -1)" in runner
    assert "Because runner-a is broken" in runner
    assert "- Reported in example/upstream#3" in runner
    assert "Signed-off-by" not in r.stdout and "Fixpack-Fix" not in r.stdout
    assert "runner-a: already forwarded: https://example.org/upstream/pull/7" in r.stderr


# -- [upstream] as data -------------------------------------------------------------------------------


def _upstream_table(cookbook, block: str) -> None:
    toml = cookbook.root / "fixes/runner-a/fix.toml"
    text = toml.read_text()
    head, tail = text.split("[upstream]\n", 1)
    toml.write_text(head + "[upstream]\n" + block + "\n[proof]\n" + tail.split("[proof]\n", 1)[1])


def test_an_unknown_upstream_key_is_refused(cli, cookbook):
    _pack(cookbook)
    _upstream_table(cookbook, 'forwarded = "no"\nforwarded_to = "somewhere"\n')
    r = cli("list")
    assert r.exit_code == 2
    assert "fixes/runner-a/fix.toml" in r.stderr and "unknown key 'forwarded_to' in [upstream]" in r.stderr
    assert "(did you mean 'forwarded'?)" in r.stderr


@pytest.mark.parametrize(
    "block, message",
    [
        ('forwarded = "maybe"\n', "upstream.forwarded 'maybe' is not a URL"),
        ('forwarded = "not-needed"\n', "needs a note giving the reason"),
        ('forwarded = "no"\nbug = ["issue 12"]\n', "upstream.bug 'issue 12' is not a URL or owner/repo#N"),
        ('forwarded = "no"\norigin = "the PR"\n', "upstream.origin 'the PR' is not"),
        ('forwarded = "no"\nregressed-in = "v0.24 and later"\n', "is not a release"),
        ('status = "submitted"\nforwarded = "no"\n', "upstream.status 'submitted' does not match"),
        ('forwarded = "no"\nref = "#12"\n', "upstream.ref is the old form's"),
        ('note = "nothing else"\n', "[upstream] needs forwarded"),
    ],
)
def test_upstream_fields_are_checked(cli, cookbook, block, message):
    _pack(cookbook)
    _upstream_table(cookbook, block)
    r = cli("list")
    assert r.exit_code == 2 and message in r.stderr, r.stderr


def test_show_and_list_give_the_upstream_fields(cli, cookbook):
    _pack(cookbook)
    _upstream_table(
        cookbook,
        'origin = "example/upstream#9"\nregressed-in = "v0.24.0"\nbug = ["example/upstream#3"]\n'
        'note = "Taken from upstream."\n',
    )
    r = cli("list", "--profile", "v0.26.0", "--upstream", "--json")
    assert r.exit_code == 0
    rows = {row["id"]: row for row in json.loads(r.stdout)["fixes"]}
    assert rows["runner-a"]["subject"] == "Return 55 from f5"
    assert rows["runner-a"]["upstream"] == {
        "status": "backport",
        "forwarded": "not-needed",
        "bug": ["example/upstream#3"],
        "applied_upstream": None,
        "origin": "example/upstream#9",
        "regressed_in": "v0.24.0",
        "note": "Taken from upstream.",
    }
    # the old form (status, ref), as builders.py writes it, reads into the same fields
    assert rows["sampler-b"]["upstream"]["status"] == "pending" and rows["sampler-b"]["upstream"]["forwarded"] == "no"
    assert "upstream" not in json.loads(cli("list", "--json").stdout)["fixes"][0]
    r = cli("show", "runner-a")
    assert "upstream: backport (forwarded: not-needed)" in r.stdout
    assert "  origin: example/upstream#9" in r.stdout and "  regressed-in: v0.24.0" in r.stdout
    assert "  bug: example/upstream#3" in r.stdout


# -- the repository's own pack ----------------------------------------------------------------------


def test_the_packs_fixes_state_upstream_as_data_and_fit_a_commit():
    catalog = Catalog.load(REPO)
    assert set(catalog.fixes) == {f for profile in catalog.usable for f in profile.pack}
    for fix in catalog.fixes.values():
        table = tomlfile.read(Path(fix.source) / "fix.toml")["upstream"]
        assert "status" not in table and "ref" not in table, fix.id
        assert "forwarded" in table or "origin" in table, fix.id
        subject = fix.upstream_subject
        assert len(subject) <= SUBJECT_MAX and not subject.startswith("["), (fix.id, subject)
        message = f"{subject}\n\n{wrap(fix.why)}"
        assert not absolute_figures(message) and not FIGURE.search(message), (fix.id, FIGURE.search(message))


# -- the real pack onto the real tree -----------------------------------------------------------------

SRC_GAUDI = os.environ.get("FIXPACK_SRC_VLLM_GAUDI")


@pytest.mark.realtree
@pytest.mark.skipif(not SRC_GAUDI, reason="FIXPACK_SRC_VLLM_GAUDI is not set (a git clone of vllm-gaudi)")
@pytest.mark.skipif(shutil.which("git") is None, reason="needs git")
def test_real_mbox_applies_onto_a_clean_v0_26_0_checkout(tmp_path):
    src = Path(SRC_GAUDI)  # type: ignore[arg-type]
    if not (src / ".git").exists():
        pytest.skip(f"FIXPACK_SRC_VLLM_GAUDI={src} is not a git clone (it has no .git)")
    args = ["diff", "--profile", "v0.26.0", "gdn-prefix-cache", "fp8-moe-gather", "--format", "mbox"]
    env = dict(os.environ, PYTHONPATH=str(REPO))
    env.pop("FIXPACK_COOKBOOK", None)  # the repository's own pack
    done = subprocess.run(
        [sys.executable, "-m", "fixpack", *args, "--signoff", "--author", AUTHOR],
        capture_output=True, text=True, cwd=REPO, env=env, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    messages = re.split(r"(?m)^(?=From 0{40} )", done.stdout)[1:]
    gaudi = [m for m in messages if "\ndiff --git a/vllm_gaudi/" in m]
    assert len(gaudi) >= 2 and len(gaudi) < len(messages)  # vLLM's messages are for another repository
    repo = tmp_path / "vllm-gaudi"
    subprocess.run(["git", "clone", "-q", "--no-checkout", str(src), str(repo)], check=True)
    _git(repo, "-c", "advice.detachedHead=false", "checkout", "-q", GAUDI_COMMIT)
    _git(repo, "am", "-q", stdin="".join(gaudi))
    commits = _commits(repo, GAUDI_COMMIT)
    assert len(commits) == len(gaudi)
    for c in commits:
        _check_commit(c)
    subjects = [c["subject"] for c in commits]
    assert "Checkpoint compact GDN states for prefix caching" in subjects
    assert "Add opt-in gathered-expert FP8 MoE for low-batch decode" in subjects
    # Every message, vLLM's too, as git am would record it (git mailinfo): the same rules.
    for n, m in enumerate(messages):
        (tmp_path / "msg").write_text("")
        info = subprocess.run(
            ["git", "mailinfo", str(tmp_path / "msg"), str(tmp_path / "patch")],
            input=m, capture_output=True, text=True, check=True,
        ).stdout  # fmt: skip
        body = (tmp_path / "msg").read_text()
        subject = re.search(r"(?m)^Subject: (.*)$", info).group(1)  # type: ignore[union-attr]
        assert len(subject) <= SUBJECT_MAX, subject
        assert body.rstrip().endswith(f"Signed-off-by: {AUTHOR}"), n
        assert not COOKBOOK_FIELD.search(body) and not FIGURE.search(body), (n, body)
