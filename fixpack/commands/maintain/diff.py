"""``fixpack diff``: fixes as patches for upstream, a plain unified diff or a ``git am`` mbox.

Paths are as in the upstream repositories (``a/vllm_gaudi/...``). The mbox has one message per
fix and distribution, in plan order, each with the fix's why as its body, DEP-3-like trailers and
the pinned commit as ``base-commit``, so that ``git am`` takes the series in a clean checkout.
"""

from __future__ import annotations

import textwrap
from dataclasses import dataclass
from datetime import datetime, timezone
from email.utils import format_datetime

from ... import __version__
from ...cookbook.catalog import Catalog
from ...core.plan import resolve, restrict
from ...errors import UsageError
from ...models import Fix, Plan, Profile

__all__ = ["Message", "messages", "unified", "mbox", "upstream_status", "export"]

_STATUS = {
    "pending": "Pending",
    "submitted": "Submitted",
    "backport": "Backport",
    "inappropriate": "Inappropriate",
    "upstream": "Accepted",
}


@dataclass(frozen=True, slots=True)
class Message:
    fix: Fix
    dist: str
    patch: str


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


def upstream_status(fix: Fix) -> str:
    status = _STATUS.get(fix.upstream.status, fix.upstream.status)
    extra = fix.upstream.ref if fix.upstream.status != "inappropriate" else fix.upstream.note
    return f"{status} [{extra}]" if extra else status


def _wrap(text: str) -> str:
    paragraphs = [p.strip() for p in text.strip().split("\n\n")]
    return "\n\n".join(
        p if p.startswith(("-", "*", " ", "|")) else textwrap.fill(" ".join(p.split()), 72) for p in paragraphs
    )


def _header(text: str) -> str:
    """A header value as git writes it: RFC 2047 encoded when it is not plain ASCII."""
    if text.isascii():
        return text
    from email.header import Header

    return Header(text, "utf-8").encode()


def mbox(plan: Plan, profile: Profile, dist: str | None = None, author: str = "", now: datetime | None = None) -> str:
    msgs = messages(plan, dist)
    when = format_datetime(now or datetime.now(timezone.utc))
    author = author or "fixpack <fixpack@localhost>"
    pins = {p.dist: p for p in profile.pins}
    parts = []
    for n, m in enumerate(msgs, 1):
        trailers = [f"Upstream-Status: {upstream_status(m.fix)}", f"Fixpack-Fix: {m.fix.id} ({profile.release})"]
        if m.fix.upstream.note and m.fix.upstream.status != "inappropriate":
            trailers.append(f"Upstream-Note: {' '.join(m.fix.upstream.note.split())}")
        if m.fix.verified_on:
            trailers.append(f"Verified-On: {' '.join(m.fix.verified_on.split())}")
        number = f"[PATCH {n}/{len(msgs)}]" if len(msgs) > 1 else "[PATCH]"
        parts.append(
            "From 0000000000000000000000000000000000000000 Mon Sep 17 00:00:00 2001\n"
            f"From: {_header(author)}\n"
            f"Date: {when}\n"
            f"Subject: {_header(f'{number} {m.fix.title}')}\n"
            "MIME-Version: 1.0\n"
            "Content-Type: text/plain; charset=UTF-8\n"
            "Content-Transfer-Encoding: 8bit\n"
            "\n"
            f"{_wrap(m.fix.why)}\n"
            "\n"
            + "\n".join(trailers)
            + "\n---\n"
            + m.patch
            + f"\nbase-commit: {pins[m.dist].commits[0] if pins[m.dist].commits else 'unknown'}\n"
            + f"-- \nfixpack {__version__}\n\n"
        )
    return "".join(parts)


def export(
    catalog: Catalog, fixes: tuple[str, ...], profile_name: str | None, fmt: str, dist: str | None, author: str = ""
) -> tuple[str, str]:
    """The patch text, and the profile whose plan it follows (the first that has all ``fixes``
    when none is named)."""
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
    text = mbox(plan, profile, dist, author) if fmt == "mbox" else unified(plan, dist)
    return text, profile.name
