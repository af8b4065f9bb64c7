"""``fixpack diff``: fixes as patches for upstream: a plain unified diff, a ``git am`` mbox, or the
title and body of each fix's pull request.

Paths are as in the upstream repositories (``a/vllm_gaudi/...``). The mbox has one message per fix
and distribution, in plan order, each as upstream takes a commit: the fix's upstream subject (at
most 72 characters), its why wrapped at 72 and, with ``--signoff``, a ``Signed-off-by:`` that is
the author. What the cookbook knows and upstream does not (the fix's id, its ``[upstream]`` facts,
how it was verified, the notes for its maintainers) is written below the ``---`` line, where ``git
am`` leaves it out of the commit; the pinned commit is the ``base-commit``, so that ``git am`` takes
the series in a clean checkout.
"""

from __future__ import annotations

import os
import re
import subprocess
import textwrap
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timezone
from email.utils import format_datetime

from ... import __version__
from ...cookbook.catalog import Catalog
from ...core.patch import index
from ...core.plan import resolve, restrict
from ...errors import UsageError
from ...models import SUBJECT_MAX, Fix, Plan, Profile

__all__ = [
    "Message",
    "Export",
    "messages",
    "unified",
    "wrap",
    "facts",
    "absolute_figures",
    "identities",
    "mbox",
    "pr",
    "export",
]

WIDTH = 72  # the commit body's width, as git's own messages and upstream's are wrapped
FORMATS = ("unified", "mbox", "pr")

# A number with a unit of time, rate, size, share or speed-up: "1.6 ms", "315 tokens/s", "43%",
# "2.5x", "12 GB". Upstream's content rules forbid absolute performance figures in a commit or PR.
_FIGURE = re.compile(
    r"(?<![\w.])~?[0-9]+(?:[.,][0-9]+)*\s?"
    r"(?:ms|us|µs|ns|s|secs?|seconds?|%|percent|x|×|tokens?/s|tok/s|req/s|requests?/s|it/s"
    r"|[KMGT]i?B(?:/s)?|[GT]FLOPS)(?![\w/])",
    re.IGNORECASE,
)
# A line that git mailinfo would take for the start of the patch, or an mbox reader for a new message.
_PATCH_START = re.compile(r"(?:diff -|Index: |---|From )")
_IDENT = re.compile(r"\s*([^<>\n]*?)\s*<([^<>\s@]+@[^<>\s]+)>\s*\Z")


@dataclass(frozen=True, slots=True)
class Message:
    fix: Fix
    dist: str
    patch: str


@dataclass(frozen=True, slots=True)
class Export:
    text: str
    profile: str  # the profile whose plan it follows
    notes: tuple[str, ...] = ()  # for stderr: figures found, fixes not meant for upstream


def messages(plan: Plan, dist: str | None = None) -> list[Message]:
    """One message per fix and distribution, in plan order (``dist``: only that distribution)."""
    out = []
    for fix in plan.fixes:
        by_dist: dict[str, list[str]] = {}
        for pc in plan.changes:
            if pc.change.fix_id == fix.id and (dist is None or pc.dist == dist):
                by_dist.setdefault(pc.dist, []).append(_ensure_git_header(pc.change.path, pc.change.patch))
        for d, patches in by_dist.items():
            out.append(Message(fix, d, "".join(patches)))
    return out


def _ensure_git_header(path: str, patch: str) -> str:
    text = patch if patch.endswith("\n") else patch + "\n"
    return text if text.startswith("diff --git ") else f"diff --git a/{path} b/{path}\n{text}"


def unified(plan: Plan, dist: str | None = None) -> str:
    return "".join(m.patch for m in messages(plan, dist))


# -- the text: blocks of a why, wrapped for a commit or joined for a PR ---------------------------


def _blocks(text: str) -> list[list[tuple[str, str]]]:
    """Paragraphs of ``text``, each a list of blocks (kind, text): "prose", "item" (a "- " or "* "
    list item, its continuation lines indented) or "verbatim" (a line indented by four spaces, or a
    table row), the prose and items with their lines joined."""
    out = []
    for para in re.split(r"\n[ \t]*\n", text.strip("\n")):
        blocks: list[tuple[str, str]] = []
        for line in para.splitlines():
            last = blocks[-1][0] if blocks else ""
            if line.startswith("|"):
                blocks.append(("verbatim", line.rstrip()))
            elif re.match(r"[-*] ", line):
                blocks.append(("item", line[2:].strip()))
            elif line.startswith(" ") and last == "item":
                blocks[-1] = ("item", f"{blocks[-1][1]} {line.strip()}")
            elif line.startswith("    "):
                blocks.append(("verbatim", line.rstrip()))
            elif last == "prose":
                blocks[-1] = ("prose", f"{blocks[-1][1]} {line.strip()}")
            else:
                blocks.append(("prose", line.strip()))
        if blocks:
            out.append(blocks)
    return out


def _fill(text: str, width: int, first: str = "", rest: str = "") -> list[str]:
    return textwrap.wrap(
        " ".join(text.split()), width, initial_indent=first, subsequent_indent=rest,
        break_long_words=False, break_on_hyphens=False,
    )  # fmt: skip


def wrap(text: str, width: int = WIDTH) -> str:
    """``text`` (a why) as a commit body: prose and list items filled to ``width``, verbatim lines kept;
    a line that git would read as the start of the patch (``diff -``, ``---``) or an mbox as a new
    message (``From ``) gets a leading space."""
    paragraphs = []
    for blocks in _blocks(text):
        lines: list[str] = []
        for kind, body in blocks:
            if kind == "verbatim":
                lines.append(body)
            elif kind == "item":
                lines.extend(_fill(body, width, "- ", "  "))
            else:
                lines.extend(_fill(body, width))
        paragraphs.append("\n".join(" " + ln if _PATCH_START.match(ln) else ln for ln in lines))
    return "\n\n".join(paragraphs)


def absolute_figures(text: str) -> list[str]:
    """The absolute figures in ``text`` (a number with a unit: ``1.6 ms``, ``315 tokens/s``, ``43%``)."""
    return [m.group(0) for m in _FIGURE.finditer(text)]


# -- who: the author and the sign-off -----------------------------------------------------------------


def _identity(value: str, what: str) -> str:
    m = _IDENT.match(value)
    if not m or not m.group(1):
        raise UsageError(f"{what} {value!r} is not an identity: give it as 'Name <email>'")
    return f"{m.group(1)} <{m.group(2)}>"


def _git_config(key: str, env: Mapping[str, str], cwd: str | None) -> str:
    try:
        done = subprocess.run(
            ["git", "config", "--get", key], capture_output=True, text=True, env=dict(env), cwd=cwd, timeout=30
        )
    except (OSError, subprocess.SubprocessError):
        return ""
    return done.stdout.strip() if done.returncode == 0 else ""


def _git_identity(role: str, env: Mapping[str, str], cwd: str | None) -> tuple[str, str, list[str]]:
    """Git's author or committer identity as ``git commit`` takes it: GIT_<ROLE>_NAME and _EMAIL,
    else user.name and user.email (git config). (identity or "", where it came from, what is missing)"""
    parts, sources, missing = [], [], []
    for field, key in (("NAME", "user.name"), ("EMAIL", "user.email")):
        var = f"GIT_{role}_{field}"
        value, source = env.get(var, "").strip(), var
        if not value:
            value, source = _git_config(key, env, cwd), key
        parts.append(value)
        sources.append(source)
        if not value:
            missing.append(key)
    if missing:
        return "", "", missing
    return _identity(f"{parts[0]} <{parts[1]}>", f"git's {role.lower()} identity"), ", ".join(sources), []


def identities(
    author: str, signoff: bool, env: Mapping[str, str] | None = None, cwd: str | None = None
) -> tuple[str, str]:
    """(the From: of each message, its Signed-off-by: or "" without ``signoff``).

    The author is ``author`` ('Name <email>'), else git's author identity; the sign-off is
    ``author``, else git's committer identity (whom ``git commit -s`` signs for), and must be the
    author. Nothing is made up: without an identity, a UsageError says what to pass."""
    env = os.environ if env is None else env
    if author:
        who = _identity(author, "--author")
        return who, who if signoff else ""
    who, source, missing = _git_identity("AUTHOR", env, cwd)
    if not who:
        raise UsageError(
            f"an mbox needs an author, and git has no {' and no '.join(missing)}: pass --author 'Name <email>' "
            "(or set them: git config --global user.name 'Name'; git config --global user.email 'email')"
        )
    if not signoff:
        return who, ""
    signer, signer_source, missing = _git_identity("COMMITTER", env, cwd)
    if not signer:
        raise UsageError(f"--signoff: git has no committer {' and no '.join(missing)}: pass --author 'Name <email>'")
    if signer != who:
        raise UsageError(
            f"--signoff: the sign-off would be {signer} ({signer_source}) and the author {who} ({source}); "
            "a sign-off that is not the author's is refused: pass --author 'Name <email>' to use one identity"
        )
    return who, signer


# -- the cookbook's own facts, below the line ----------------------------------------------------


def facts(fix: Fix, profile: Profile) -> list[tuple[str, str]]:
    """What the cookbook records of ``fix`` and upstream has no use for, as (field, value) rows:
    its id, its [upstream] facts (DEP-3's field names), its proof, where it was verified, its note."""
    up = fix.upstream
    rows = [("Fixpack-Fix", f"{fix.id} (profile {profile.name}, release {profile.release})")]
    rows.append(("Forwarded", up.forwarded or "no"))
    rows.extend(("Bug", b) for b in up.bug)
    for name, value in (
        ("Origin", up.origin), ("Applied-Upstream", up.applied_upstream), ("Regressed-In", up.regressed_in),
    ):  # fmt: skip
        if value:
            rows.append((name, value))
    rows.append(("Proof", f"{fix.proof.level}: {fix.proof.reason}" if fix.proof.reason else fix.proof.level))
    if fix.verified_on:
        rows.append(("Verified-On", fix.verified_on))
    if up.note:
        rows.append(("Note", up.note))
    return rows


def _field(name: str, value: str) -> str:
    """One field as DEP-3 folds it: continuation lines start with a space, paragraphs are parted by " ."."""
    paragraphs = [p for p in re.split(r"\n[ \t]*\n", value.strip()) if p.strip()]
    lines = _fill(paragraphs[0], WIDTH, f"{name}: ", " ")
    for p in paragraphs[1:]:
        lines += [" .", *_fill(p, WIDTH, " ", " ")]
    return "\n".join(lines)


# -- the formats ------------------------------------------------------------------------------------


def _subject(fix: Fix) -> str:
    subject = fix.upstream_subject
    if len(subject) > SUBJECT_MAX:
        raise UsageError(
            f"fix {fix.id}: its title is {len(subject)} characters, over the {SUBJECT_MAX} of a commit subject: "
            f"give {fix.source or 'its'}/fix.toml a subject (at most {SUBJECT_MAX}, a plain description)",
            fix_id=fix.id,
        )
    return subject


def _header(text: str) -> str:
    """A header value as git writes it: RFC 2047 encoded when it is not plain ASCII."""
    if text.isascii():
        return text
    from email.header import Header

    return Header(text, "utf-8").encode()


def _base(profile: Profile, dist: str) -> str:
    pin = next(p for p in profile.pins if p.dist == dist)
    return pin.commits[0] if pin.commits else "unknown"


def _notes(msgs: list[Message], texts: list[str], mail: bool) -> list[str]:
    """What the maintainer should know before sending: fixes not meant for upstream, fixes already
    sent, a subject git am would cut (``mail``), and absolute figures in the text upstream would read."""
    out, seen = [], set()
    for m, text in zip(msgs, texts):
        up = m.fix.upstream
        if m.fix.id not in seen:
            seen.add(m.fix.id)
            if mail and m.fix.upstream_subject.startswith("["):
                out.append(
                    f"{m.fix.id}: git am drops the leading [...] of its subject unless run as git am --keep-non-patch"
                )
            if up.forwarded == "not-needed" and not (up.origin or up.applied_upstream):
                out.append(f"{m.fix.id}: not for upstream (forwarded = not-needed): {up.note.split('. ')[0]}")
            elif up.status == "submitted":
                out.append(f"{m.fix.id}: already forwarded: {up.forwarded}")
            elif up.applied_upstream:
                out.append(f"{m.fix.id}: already upstream: {up.applied_upstream}")
        figures = absolute_figures(text)
        if figures:
            out.append(
                f"{m.fix.id}: upstream forbids absolute performance figures, and its text has "
                f"{', '.join(repr(f) for f in dict.fromkeys(figures))}: rephrase the why (or move that to "
                "[upstream] note, which stays below the line)"
            )
    return out


def mbox(
    plan: Plan,
    profile: Profile,
    dist: str | None = None,
    author: str = "",
    now: datetime | None = None,
    signoff: str = "",
) -> str:
    """The series ``git am`` takes: ``author`` is each message's From: ('Name <email>'), ``signoff``
    its Signed-off-by: ("" for none)."""
    if not author:
        raise UsageError("an mbox needs an author: pass --author 'Name <email>'")
    msgs = messages(plan, dist)
    when = format_datetime(now or datetime.now(timezone.utc))
    parts = []
    for n, m in enumerate(msgs, 1):
        number = f"[PATCH {n}/{len(msgs)}]" if len(msgs) > 1 else "[PATCH]"
        body = wrap(m.fix.why) + (f"\n\nSigned-off-by: {signoff}" if signoff else "")
        below = "\n".join(_field(name, value) for name, value in facts(m.fix, profile))
        parts.append(
            "From 0000000000000000000000000000000000000000 Mon Sep 17 00:00:00 2001\n"
            f"From: {_header(author)}\n"
            f"Date: {when}\n"
            f"Subject: {_header(f'{number} {_subject(m.fix)}')}\n"
            "MIME-Version: 1.0\n"
            "Content-Type: text/plain; charset=UTF-8\n"
            "Content-Transfer-Encoding: 8bit\n"
            "\n"
            f"{body}\n"
            "---\n"
            "For the cookbook, not for the commit (git am leaves out what is between --- and the diff):\n"
            f"{below}\n"
            "\n"
            f"{m.patch}"
            f"\nbase-commit: {_base(profile, m.dist)}\n"
            f"-- \nfixpack {__version__}\n\n"
        )
    return "".join(parts)


_CODE_SPAN = re.compile(r"(`[^`\n]*`)")
# An identifier, dotted name or path with an underscore in it, or a call: markdown would read its
# underscores as emphasis.
_CODE_WORD = re.compile(r"(?<![\w`/.\\])([A-Za-z_]\w*(?:\(\))?(?:[./][A-Za-z_]\w*(?:\(\))?)*)")


def _inline(text: str) -> str:
    """Prose as GitHub's markdown renders it as written: code-like words in backticks, ``*`` escaped."""
    out = []
    for i, part in enumerate(_CODE_SPAN.split(text)):
        if i % 2:
            out.append(part)
            continue

        def code(m: re.Match[str]) -> str:
            word = m.group(1)
            return f"`{word}`" if "_" in word or word.endswith("()") else word

        out.append(_CODE_WORD.sub(code, part).replace("*", "\\*"))
    return "".join(out)


def _markdown(text: str) -> str:
    """A why or a note as a PR body's markdown: one line per paragraph and per list item."""
    paragraphs = []
    for blocks in _blocks(text):
        lines: list[str] = []
        for i, (kind, body) in enumerate(blocks):
            if i and kind != blocks[i - 1][0]:
                lines.append("")  # a list, a table or prose after it: markdown needs the blank line
            lines.append(body if kind == "verbatim" else ("- " if kind == "item" else "") + _inline(body))
        paragraphs.append("\n".join(lines))
    return "\n\n".join(paragraphs)


def _stats(patch: str) -> list[str]:
    """Each file of ``patch`` as the PR's "What" lists it: `path` (new|deleted, +added -removed)."""
    out = []
    for fd in index(patch):
        added = removed = 0
        in_hunk = False
        for line in fd.text.splitlines():
            if line.startswith("@@"):
                in_hunk = True
            elif in_hunk and line.startswith("+"):
                added += 1
            elif in_hunk and line.startswith("-"):
                removed += 1
        kind = "new, " if fd.creates else "deleted, " if fd.deletes else ""
        out.append(f"`{fd.path}` ({kind}+{added} -{removed})")
    return out


def _not_tested(fix: Fix) -> str:
    if fix.proof.level != "demonstrated" and fix.proof.reason:
        return fix.proof.reason
    said = [
        s.strip()
        for s in re.split(r"(?<=[.;])\s+", fix.verified_on)
        if re.search(r"\bnot (run|verified|exercised|checked|covered|shown|tested)\b", s, re.IGNORECASE)
    ]
    return " ".join(said) or "Nothing beyond what is listed above was run."


def _pr_body(fix: Fix, patch: str) -> str:
    up = fix.upstream
    tested = {
        "demonstrated": "A reproduction on a CPU fails without this change and passes with it: ",
        "partial": "A reproduction on a CPU shows part of it (see below): ",
    }.get(fix.proof.level, "")
    sections = [
        ("What", f"{_inline(_subject(fix))}.\n\n" + "\n".join(f"- {s}" for s in _stats(patch))),
        ("Why", _markdown(fix.why)),
        ("How it was tested", _inline(tested + (fix.verified_on or "not stated."))),
        ("Not tested", _markdown(_not_tested(fix))),
    ]
    related = [f"- Backport of {up.origin}"] if up.origin else []
    related += [f"- Reported in {b}" for b in up.bug]
    if up.regressed_in:
        related.append(f"- An earlier fix of this was lost in {up.regressed_in}")
    if related:
        sections.append(("Related", "\n".join(related)))
    return "\n\n".join(f"## {name}\n\n{text}" for name, text in sections)


def pr(plan: Plan, profile: Profile, dist: str | None = None) -> str:
    """Per fix and distribution: the pull request's title and body, as upstream asks for them (what,
    why, how it was tested, what was not), between lines that say which fix and base they are for."""
    msgs = messages(plan, dist)
    parts = []
    for n, m in enumerate(msgs, 1):
        parts.append(
            f"===== PR {n}/{len(msgs)}: {m.fix.id}, for {m.dist} at {_base(profile, m.dist)} =====\n"
            "Title:\n"
            f"{_subject(m.fix)}\n"
            "\n"
            "Body:\n"
            f"{_pr_body(m.fix, m.patch)}\n"
            "\n"
        )
    return "".join(parts)


def export(
    catalog: Catalog,
    fixes: tuple[str, ...],
    profile_name: str | None,
    fmt: str,
    dist: str | None,
    author: str = "",
    signoff: bool = False,
    env: Mapping[str, str] | None = None,
    cwd: str | None = None,
) -> Export:
    """The patch text, the profile whose plan it follows (the first that has all ``fixes`` when
    none is named), and notes for the maintainer. ``author`` and ``signoff`` as :func:`identities`
    resolves them (``env`` and ``cwd``: where git's identity is read; default this process's)."""
    if fmt not in FORMATS:
        raise UsageError(f"--format {fmt!r}: one of {', '.join(FORMATS)}")
    if signoff and fmt != "mbox":
        raise UsageError("--signoff signs commits: it goes with --format mbox")
    if not fixes and not profile_name:
        raise UsageError("name fixes, or a --profile")
    if profile_name:
        profile = catalog.profile(profile_name)
        plan = resolve(catalog.fixes, profile, fixes)
    else:
        for f in fixes:
            catalog.fix(f)
        holders = [p for p in catalog.profiles.values() if all(f in p.pack for f in fixes)]
        if not holders:
            raise UsageError("no profile has all of these fixes; give --profile")
        profile = holders[0]
        plan = resolve(catalog.fixes, profile, tuple(f for f in fixes if f in profile.opt_ins))
        plan = restrict(plan, set(fixes))
    if dist and dist not in {p.dist for p in profile.pins}:
        raise UsageError(f"--dist {dist!r}: profile {profile.name} pins {', '.join(p.dist for p in profile.pins)}")
    if fmt == "unified":
        return Export(unified(plan, dist), profile.name)
    msgs = messages(plan, dist)
    if fmt == "pr":
        text = pr(plan, profile, dist)
        read = [f"{_subject(m.fix)}\n{_pr_body(m.fix, m.patch)}" for m in msgs]
    else:
        who, signer = identities(author, signoff, env, cwd)
        text = mbox(plan, profile, dist, who, signoff=signer)
        read = [f"{_subject(m.fix)}\n{wrap(m.fix.why)}" for m in msgs]
    return Export(text, profile.name, tuple(_notes(msgs, read, fmt == "mbox")))
