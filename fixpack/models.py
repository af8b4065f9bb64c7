"""The words of fixpack as frozen data and the closed sets of words it reports: no I/O here."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

__all__ = [
    "PROOF_LEVELS",
    "UPSTREAM_STATUSES",
    "SUBJECT_MAX",
    "Word",
    "Action",
    "FileState",
    "PortOutcome",
    "ProofOutcome",
    "Fingerprint",
    "Change",
    "Upstream",
    "upstream_status",
    "Proof",
    "Fix",
    "Pin",
    "Profile",
    "FileEntry",
    "PlannedChange",
    "Plan",
]

PROOF_LEVELS = ("demonstrated", "partial", "none")
UPSTREAM_STATUSES = ("pending", "submitted", "backport", "inappropriate", "upstream")
SUBJECT_MAX = 72  # git's limit for a commit subject; upstream squash-merges a PR as "Title (#NNNN)"


class Word(str, enum.Enum):
    """A word of the contract: compares, formats and serialises as its plain string."""

    def __str__(self) -> str:
        return self.value

    def __format__(self, spec: str) -> str:
        return format(self.value, spec)


class Action(Word):
    """What apply or revert did (or would do) with one fix."""

    APPLIED = "applied"
    ALREADY_APPLIED = "already-applied"
    WOULD_APPLY = "would-apply"
    REFUSED = "refused"
    REVERTED = "reverted"
    WOULD_REVERT = "would-revert"


class FileState(Word):
    """What an installed file is with respect to the changes that edit it."""

    PRISTINE = "pristine"  # the release's bytes: changes can be applied
    APPLIED = "applied"  # some changes are in it, exactly
    DRIFTED = "drifted"  # neither: refuse, and show how it differs
    MISSING = "missing"  # absent, and the change does not create it


class PortOutcome(Word):
    UNCHANGED = "unchanged"  # applies, from exactly the bytes it was locked against
    OFFSET = "offset"  # its hunks apply to a changed file
    CST = "cst"  # its libcst transform applies to a changed file
    MERGED = "merged"  # its hunks do not apply, but a three-way merge with the old release's file does
    HAND = "hand"  # the fix's own port to the new release (fix.toml has that release) applies
    UPSTREAM = "upstream"  # the new tree already has its result
    CONFLICT = "conflict"  # it does not apply, or the result does not compile

    @property
    def ported(self) -> bool:
        return self not in (PortOutcome.UPSTREAM, PortOutcome.CONFLICT)


class ProofOutcome(Word):
    """How one run of a fix's proof ended, on one tree: what verify, port and the mutants all judge
    by (port reports these words; verify's proof word is made from a fix's two runs)."""

    PASSES = "passes"  # the bug is not there
    BUG_PRESENT = "bug-present"  # the proof failed: the bug is there
    ERROR = "error"  # the proof failed otherwise than by its verdict (a function moved, it timed out)
    CANNOT_RUN = "cannot-run"  # port: the proof's imports fail on the new tree (it needs another vLLM)
    NOT_RUN = "not-run"


@dataclass(frozen=True, slots=True)
class Fingerprint:
    """sha256 of one file: in the release (``pristine``), before and after this change in pack order."""

    pristine: str
    before: str
    after: str


@dataclass(frozen=True, slots=True)
class Change:
    """One file edit of a fix on one release."""

    fix_id: str
    release: str
    path: str  # as in the upstream repository, e.g. vllm_gaudi/v1/worker/hpu_model_runner.py
    patch: str  # the unified diff of this one file, text as stored
    fingerprint: Fingerprint | None  # None until ``fixpack lock`` has run
    creates: bool = False
    deletes: bool = False


@dataclass(frozen=True, slots=True, kw_only=True)
class Upstream:
    """Where a fix stands upstream, as DEP-3 (Debian's patch tagging guidelines) records it.

    ``status`` is one of UPSTREAM_STATUSES, derived from the fields (see :func:`upstream_status`)
    or, in a fix.toml of the old form, as written there with its free-text ``ref``."""

    status: str
    ref: str = ""  # the old form's reference, free text (the new form's fields replace it)
    note: str = ""  # for the cookbook's maintainers; the reason, when forwarded is "not-needed"
    forwarded: str = ""  # a URL or owner/repo#N where it was sent, "no", or "not-needed"
    bug: tuple[str, ...] = ()  # upstream bug reports: URLs or owner/repo#N
    applied_upstream: str = ""  # the upstream commit or PR that has it
    origin: str = ""  # for a backport: the upstream commit or PR it comes from
    regressed_in: str = ""  # the release that lost an earlier upstream fix of the same bug


def upstream_status(forwarded: str, applied_upstream: str = "", origin: str = "") -> str:
    """The word of UPSTREAM_STATUSES that the DEP-3 fields amount to."""
    if applied_upstream:
        return "upstream"
    if origin:
        return "backport"
    if forwarded == "not-needed":
        return "inappropriate"
    return "pending" if forwarded in ("", "no") else "submitted"


@dataclass(frozen=True, slots=True, kw_only=True)
class Proof:
    level: str  # one of PROOF_LEVELS, as the fix claims it
    reason: str = ""
    script: str | None = None  # path of proof.py, when the fix has one
    harmless: tuple[tuple[str, str], ...] = ()  # (mutant id, why): survivors of verify --mutants explained
    unreachable: tuple[tuple[str, str], ...] = ()  # (added line id, why): lines verify --coverage need not see run


@dataclass(frozen=True, slots=True, kw_only=True)
class Fix:
    id: str
    title: str
    why: str
    requires: tuple[str, ...]
    conflicts: tuple[str, ...]
    opt_in: bool
    upstream: Upstream
    proof: Proof
    verified_on: str
    changes: dict[str, tuple[Change, ...]] = field(default_factory=dict)  # release -> changes
    source: str = ""  # the fix's directory, for messages
    supersedes: tuple[str, ...] = ()  # fixes this (opt-in) one replaces: dropped from a plan that has it
    subject: str = ""  # the upstream commit subject and PR title, when the title does not fit one

    @property
    def upstream_subject(self) -> str:
        """The subject line of this fix's upstream commit: ``subject``, else the title."""
        return self.subject or self.title

    @property
    def releases(self) -> tuple[str, ...]:
        return tuple(self.changes)


@dataclass(frozen=True, slots=True, kw_only=True)
class Pin:
    """A distribution a release pins: name, import package, version and accepted commits.

    ``match`` says what a build must show: ``"commit"`` (a commit read from the install must be one of
    ``commits``) or ``"fingerprints"`` (any build of the version: a project that publishes one wheel
    per platform, each with its own build commit; every patched file's fingerprint still decides)."""

    dist: str
    package: str
    version: str
    commits: tuple[str, ...]
    match: str = "commit"


@dataclass(frozen=True, slots=True, kw_only=True)
class Profile:
    name: str
    release: str
    description: str
    pins: tuple[Pin, ...]
    pack: tuple[str, ...]  # every fix of the release, opt-ins in their slots, in pack order
    opt_ins: tuple[str, ...]  # the pack's fixes that are applied only when named
    draft: str = ""  # why its pins are not real yet ("pin vllm-gaudi: version TODO"); "" when they are
    # distributions that must not be installed beside it -> the profile that covers them
    instead: tuple[tuple[str, str], ...] = ()

    @property
    def default_fixes(self) -> tuple[str, ...]:
        return tuple(f for f in self.pack if f not in self.opt_ins)

    def pin_for_path(self, path: str) -> Pin | None:
        top = path.split("/", 1)[0]
        return next((p for p in self.pins if p.package == top), None)


@dataclass(frozen=True, slots=True)
class FileEntry:
    """The manifest's entry for one patched file (its ``files`` table)."""

    dist: str
    pristine: str | None  # sha256 of the release's file; None if the plan created it
    applied: str | None  # sha256 after the plan; None if the plan deleted it
    fixes: tuple[str, ...]  # the fixes whose changes made it so, in order
    patches: tuple[str, ...] = ()  # sha256 of each of those changes' patch text: a new cookbook shows


@dataclass(frozen=True, slots=True)
class PlannedChange:
    change: Change
    dist: str


@dataclass(frozen=True, slots=True)
class Plan:
    """A profile and opt-ins resolved to fixes in pack order, and their changes in that order."""

    profile: Profile
    fixes: tuple[Fix, ...]
    pulled_in: dict[str, str]  # fix id -> the fix that required it, for fixes not asked for
    changes: tuple[PlannedChange, ...]
    superseded: dict[str, str] = field(default_factory=dict)  # fix id -> the fix in the plan that replaces it

    @property
    def fix_ids(self) -> tuple[str, ...]:
        return tuple(f.id for f in self.fixes)

    def paths(self) -> tuple[str, ...]:
        seen: dict[str, None] = {}
        for pc in self.changes:
            seen.setdefault(pc.change.path, None)
        return tuple(seen)

    def changes_for(self, path: str) -> tuple[PlannedChange, ...]:
        return tuple(pc for pc in self.changes if pc.change.path == path)
