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

import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timezone
from email.utils import format_datetime
from pathlib import Path

from .... import __version__
from ....cookbook.catalog import Catalog
from ....core.patch import as_git_diff, index
from ....core.plan import resolve, restrict
from ....errors import UsageError
from ....models import SUBJECT_MAX, Fix, Plan, Profile
from .commit_text import WIDTH, absolute_figures, fill, identities, inline, markdown, wrap

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

FORMATS = ("unified", "mbox", "pr")


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
                by_dist.setdefault(pc.dist, []).append(as_git_diff(pc.change.path, pc.change.patch))
        for d, patches in by_dist.items():
            out.append(Message(fix, d, "".join(patches)))
    return out


def unified(plan: Plan, dist: str | None = None) -> str:
    return "".join(m.patch for m in messages(plan, dist))


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
    lines = fill(paragraphs[0], WIDTH, f"{name}: ", " ")
    for p in paragraphs[1:]:
        lines += [" .", *fill(p, WIDTH, " ", " ")]
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
    rebased: tuple[list[Message], Mapping[str, str]] | None = None,
) -> str:
    """The series ``git am`` takes: ``author`` is each message's From: ('Name <email>'), ``signoff``
    its Signed-off-by: ("" for none). ``rebased``: the messages and bases of ``diff --onto``."""
    if not author:
        raise UsageError("an mbox needs an author: pass --author 'Name <email>'")
    msgs, bases = rebased or (messages(plan, dist), {})
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
            f"\nbase-commit: {bases.get(m.dist) or _base(profile, m.dist)}\n"
            f"-- \nfixpack {__version__}\n\n"
        )
    return "".join(parts)


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
        ("What", f"{inline(_subject(fix))}.\n\n" + "\n".join(f"- {s}" for s in _stats(patch))),
        ("Why", markdown(fix.why)),
        ("How it was tested", inline(tested + (fix.verified_on or "not stated."))),
        ("Not tested", markdown(_not_tested(fix))),
    ]
    related = [f"- Backport of {up.origin}"] if up.origin else []
    related += [f"- Reported in {b}" for b in up.bug]
    if up.regressed_in:
        related.append(f"- An earlier fix of this was lost in {up.regressed_in}")
    if related:
        sections.append(("Related", "\n".join(related)))
    return "\n\n".join(f"## {name}\n\n{text}" for name, text in sections)


def pr(
    plan: Plan,
    profile: Profile,
    dist: str | None = None,
    rebased: tuple[list[Message], Mapping[str, str]] | None = None,
) -> str:
    """Per fix and distribution: the pull request's title and body, as upstream asks for them (what,
    why, how it was tested, what was not), between lines that say which fix and base they are for."""
    msgs, bases = rebased or (messages(plan, dist), {})
    parts = []
    for n, m in enumerate(msgs, 1):
        parts.append(
            f"===== PR {n}/{len(msgs)}: {m.fix.id}, for {m.dist} at "
            f"{bases.get(m.dist) or _base(profile, m.dist)} =====\n"
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
    onto: Mapping[str, Path] | None = None,
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
        holders = [p for p in catalog.usable if all(f in p.pack for f in fixes)]
        if not holders:
            raise UsageError("no profile has all of these fixes; give --profile")
        profile = holders[0]
        plan = resolve(catalog.fixes, profile, tuple(f for f in fixes if f in profile.opt_ins))
        plan = restrict(plan, set(fixes))
    if dist and dist not in {p.dist for p in profile.pins}:
        raise UsageError(f"--dist {dist!r}: profile {profile.name} pins {', '.join(p.dist for p in profile.pins)}")
    rebased: tuple[list[Message], Mapping[str, str]] | None = None
    left_out: list[str] = []
    if onto:
        from ..porting.onto import rebased as rebase  # runs port: loaded only for --onto

        if dist and dist not in onto:
            raise UsageError(f"--dist {dist!r} with --onto {', '.join(onto)}: export only what is rebased")
        rows, left_out, bases = rebase(catalog, plan, profile, dict(onto))
        msgs = [Message(*row) for row in rows]
        rebased = (msgs, bases)
    else:
        msgs = messages(plan, dist)
    if fmt == "unified":
        return Export("".join(m.patch for m in msgs), profile.name, tuple(left_out))
    if fmt == "pr":
        text = pr(plan, profile, dist, rebased)
        read = [f"{_subject(m.fix)}\n{_pr_body(m.fix, m.patch)}" for m in msgs]
    else:
        who, signer = identities(author, signoff, env, cwd)
        text = mbox(plan, profile, dist, who, signoff=signer, rebased=rebased)
        read = [f"{_subject(m.fix)}\n{wrap(m.fix.why)}" for m in msgs]
    return Export(text, profile.name, tuple(left_out + _notes(msgs, read, fmt == "mbox")))
