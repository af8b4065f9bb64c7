"""The text of an upstream commit and PR: a why wrapped as a commit body or joined as markdown, the
absolute figures upstream's rules forbid, and who the author and the sign-off are (``--author``, else
git's identity; never a made-up one)."""

from __future__ import annotations

import os
import re
import subprocess
import textwrap
from collections.abc import Mapping
from pathlib import Path

from ....errors import EnvironmentProblem, UsageError
from .. import history

__all__ = ["WIDTH", "wrap", "fill", "absolute_figures", "markdown", "inline", "identities"]

WIDTH = 72  # the commit body's width, as git's own messages and upstream's are wrapped

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


def fill(text: str, width: int, first: str = "", rest: str = "") -> list[str]:
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
                lines.extend(fill(body, width, "- ", "  "))
            else:
                lines.extend(fill(body, width))
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
        done = history.git(["config", "--get", key], Path(cwd) if cwd else None, env=env, timeout=30)
    except (EnvironmentProblem, subprocess.SubprocessError):
        return ""
    return done.stdout.decode(errors="replace").strip() if done.returncode == 0 else ""


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


# -- a PR body's markdown ----------------------------------------------------------------------------

_CODE_SPAN = re.compile(r"(`[^`\n]*`)")
# An identifier, dotted name or path with an underscore in it, or a call: markdown would read its
# underscores as emphasis.
_CODE_WORD = re.compile(r"(?<![\w`/.\\])([A-Za-z_]\w*(?:\(\))?(?:[./][A-Za-z_]\w*(?:\(\))?)*)")


def inline(text: str) -> str:
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


def markdown(text: str) -> str:
    """A why or a note as a PR body's markdown: one line per paragraph and per list item."""
    paragraphs = []
    for blocks in _blocks(text):
        lines: list[str] = []
        for i, (kind, body) in enumerate(blocks):
            if i and kind != blocks[i - 1][0]:
                lines.append("")  # a list, a table or prose after it: markdown needs the blank line
            lines.append(body if kind == "verbatim" else ("- " if kind == "item" else "") + inline(body))
        paragraphs.append("\n".join(lines))
    return "\n\n".join(paragraphs)
