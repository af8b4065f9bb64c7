"""``apply --expect-fix-set DIGEST`` (or ``FIXPACK_EXPECT_FIX_SET``): a deployment pins the fix
set its instances run, as it pins an image digest. The plan's fix set is computed from the new
content of every file it changes (rebuilt in memory before the first write) and must have the
pinned digest; otherwise the apply is refused, exit 1, nothing written (a dry run too, and an
apply that finds everything applied already)."""

from __future__ import annotations

from ...core import identity
from ...core.identity import FixSet
from ...errors import Refused
from ...models import Plan
from .pipeline import nothing_changed, refused_results
from .results import Result

__all__ = ["expectation", "refuse_unexpected", "as_expected"]


def expectation(value: str | None) -> str | None:
    """The digest asked for, checked (a usage error, exit 2, for one that cannot be a digest)."""
    return None if value is None else identity.expected_digest(value)


def refuse_unexpected(expected: str | None, planned: FixSet | None, applied: FixSet | None) -> None:
    """Raise Refused when the plan leaves another fix set than ``expected``; ``applied``: the set
    there now, named against when it is the expected one."""
    if expected is None:
        return
    why = identity.mismatch(expected, planned, [applied])
    if why is not None:
        raise Refused(why)


def as_expected(result: Result, plan: Plan, expected: str | None, applied: FixSet | None) -> Result:
    """An already-applied ``result``, refused when what is applied is not the expected fix set."""
    try:
        refuse_unexpected(expected, applied, None)
    except Refused as refused:
        result.error = nothing_changed(refused)
        result.fixes = refused_results(plan, refused)
    return result
