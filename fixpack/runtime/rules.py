"""A recipe's rules (its page's "What not to do") as data, and the pure function that evaluates them.

Standard library only and no import of fixpack: fixpack's runtime check carries this file into
every vLLM process, where it applies the rules on the environment alone, and the recipe reader
and the entry point use it on the launch. Rules are plain JSON-able dicts, as a recipe file
spells them:

    {"id": "lazy-mode", "verdict": "refuse" | "warn", "message": "one line",
     "when": CONDITION}

A CONDITION is one of:

    {"env": NAME}                       the variable is set (to anything, even empty)
    {"env": NAME, "equals": VALUE}      set, and equal to VALUE
    {"env": NAME, "in": [VALUE, ...]}   set, and equal to one of them
    {"arg": OPTION}                     the serve command line turns the option on
    {"arg": OPTION, "equals": VALUE}    ... with that value (the last one given wins)
    {"arg": OPTION, "in": [VALUE, ...]}
    {"fix": FIX_ID}                     the fix is in the plan
    {"all": [CONDITION, ...]}, {"any": [CONDITION, ...]}, {"not": CONDITION}

Values compare as vLLM and vllm-gaudi read their switches: surrounding blanks stripped, case
ignored. OPTION is one spelling or a list of them (``["--enable-expert-parallel", "-ep"]``). On the
command line an option is ``--opt value``, ``--opt=value`` or, for a boolean, ``--opt`` (on) and
``--no-opt`` (off); underscores in a long option read as dashes, as vLLM's parser reads them.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

__all__ = [
    "VERDICTS",
    "RuleError",
    "Finding",
    "validate",
    "evaluate",
    "names",
    "uses_args",
    "options",
    "spellings",
    "refusal",
]

VERDICTS = ("refuse", "warn")
RULE_KEYS = {"id", "verdict", "message", "when"}
_LEAVES = ("env", "arg", "fix")
_GROUPS = ("all", "any")


class RuleError(ValueError):
    """A rule that is not one: ``where`` is the path of keys and indexes to the bad part."""

    def __init__(self, message: str, where: tuple[str | int, ...] = ()) -> None:
        super().__init__(message)
        self.message = message
        self.where = where


@dataclass(frozen=True)
class Finding:
    """A rule whose condition holds: refuse (do not start) or warn (start, and say so)."""

    rule: str
    verdict: str
    message: str


def validate(rule: Any, where: tuple[str | int, ...] = ()) -> None:
    """Raise RuleError unless ``rule`` is a rule of the vocabulary above."""
    if not isinstance(rule, Mapping):
        raise RuleError("a rule must be a mapping with id, verdict, message and when", where)
    unknown = sorted(set(rule) - RULE_KEYS)
    if unknown:
        raise RuleError(f"unknown key {unknown[0]!r} (a rule has {', '.join(sorted(RULE_KEYS))})", (*where, unknown[0]))
    for key in ("id", "message"):
        if not isinstance(rule.get(key), str) or not rule[key].strip():
            raise RuleError(f"{key!r} must be a non-empty string", (*where, key))
    if "\n" in rule["message"].strip():
        raise RuleError("'message' must be one line", (*where, "message"))
    if rule.get("verdict") not in VERDICTS:
        raise RuleError(f"'verdict' must be one of {', '.join(VERDICTS)}", (*where, "verdict"))
    if "when" not in rule:
        raise RuleError("missing 'when'", where)
    _validate_condition(rule["when"], (*where, "when"))


def _validate_condition(cond: Any, where: tuple[str | int, ...]) -> None:
    if not isinstance(cond, Mapping) or not cond:
        raise RuleError("a condition must be a mapping: env, arg, fix, all, any or not", where)
    heads = [k for k in cond if k in (*_LEAVES, *_GROUPS, "not")]
    if len(heads) != 1:
        raise RuleError("a condition names exactly one of env, arg, fix, all, any, not", where)
    head = heads[0]
    if head in _GROUPS:
        _only(cond, {head}, where)
        items = cond[head]
        if not isinstance(items, list) or not items:
            raise RuleError(f"{head!r} must be a non-empty list of conditions", (*where, head))
        for i, item in enumerate(items):
            _validate_condition(item, (*where, head, i))
    elif head == "not":
        _only(cond, {"not"}, where)
        _validate_condition(cond["not"], (*where, "not"))
    elif head == "fix":
        _only(cond, {"fix"}, where)
        if not isinstance(cond["fix"], str) or not cond["fix"]:
            raise RuleError("'fix' must be a fix id", (*where, "fix"))
    else:
        _only(cond, {head, "equals", "in"}, where)
        if head == "env" and (not isinstance(cond["env"], str) or not cond["env"]):
            raise RuleError("'env' must be a variable name", (*where, "env"))
        if head == "arg":
            spelled = spellings(cond)
            if not spelled or not all(isinstance(s, str) and s.startswith("-") and s != "-" for s in spelled):
                raise RuleError("'arg' must be an option (-x, --opt) or a list of its spellings", (*where, "arg"))
        if "equals" in cond and "in" in cond:
            raise RuleError("give 'equals' or 'in', not both", (*where, "in"))
        if "equals" in cond and not isinstance(cond["equals"], str):
            raise RuleError("'equals' must be a string (quote it)", (*where, "equals"))
        if "in" in cond and (
            not isinstance(cond["in"], list) or not cond["in"] or not all(isinstance(v, str) for v in cond["in"])
        ):
            raise RuleError("'in' must be a non-empty list of strings (quote them)", (*where, "in"))


def _only(cond: Mapping, allowed: set[str], where: tuple[str | int, ...]) -> None:
    extra = sorted(set(cond) - allowed)
    if extra:
        raise RuleError(f"unknown key {extra[0]!r} here", (*where, extra[0]))


def _norm(value: str) -> str:
    return value.strip().casefold()


def spellings(cond: Mapping) -> list[str]:
    """The spellings of an ``arg`` condition's option."""
    arg = cond.get("arg")
    return [arg] if isinstance(arg, str) else list(arg) if isinstance(arg, list) else []


def _long(option: str) -> str:
    """``--max_model_len`` reads as ``--max-model-len``, as vLLM's FlexibleArgumentParser reads it."""
    return "--" + option[2:].replace("_", "-") if option.startswith("--") else option


def options(args: Sequence[str]) -> list[tuple[str, str | None]]:
    """The options of a command line in order: (option, value); value ``None`` for an option given
    bare (a boolean's ``--opt``, or an option at the end); positional arguments are left out.
    ``--opt value`` takes the next word as the value when that word is not itself an option."""
    out: list[tuple[str, str | None]] = []
    i = 0
    while i < len(args):
        word = args[i]
        i += 1
        if word == "--":
            break
        if not word.startswith("-") or word == "-":
            continue
        name, eq, value = word.partition("=")
        if eq:
            out.append((_long(name), value))
        elif i < len(args) and not _is_option(args[i]):
            out.append((_long(name), args[i]))
            i += 1
        else:
            out.append((_long(name), None))
    return out


def _is_option(word: str) -> bool:
    if not word.startswith("-") or word == "-":
        return False
    try:  # a negative number is a value
        float(word)
    except ValueError:
        return True
    return False


def _arg_state(cond: Mapping, given: list[tuple[str, str | None]]) -> tuple[bool, str | None]:
    """(on, value) of the option after the whole command line: the last spelling given wins."""
    names = {_long(s) for s in spellings(cond)}
    negated = {"--no-" + n[2:] for n in names if n.startswith("--")}
    on, value = False, None
    for option, val in given:
        if option in names:
            on, value = True, val
        elif option in negated:
            on, value = False, None
    return on, value


def _holds(cond: Mapping, env: Mapping[str, str], given: list[tuple[str, str | None]], fixes: Collection[str]) -> bool:
    if "all" in cond:
        return all(_holds(c, env, given, fixes) for c in cond["all"])
    if "any" in cond:
        return any(_holds(c, env, given, fixes) for c in cond["any"])
    if "not" in cond:
        return not _holds(cond["not"], env, given, fixes)
    if "fix" in cond:
        return cond["fix"] in fixes
    if "env" in cond:
        if cond["env"] not in env:
            return False
        value: str | None = env[cond["env"]]
    else:
        on, value = _arg_state(cond, given)
        if not on:
            return False
    if "equals" in cond:
        return value is not None and _norm(value) == _norm(cond["equals"])
    if "in" in cond:
        return value is not None and _norm(value) in {_norm(v) for v in cond["in"]}
    return True


def evaluate(
    rules: Sequence[Mapping[str, Any]],
    env: Mapping[str, str],
    args: Sequence[str] | None,
    fixes: Collection[str],
) -> list[Finding]:
    """The rules whose condition holds for this environment, serve command line (the words after
    ``vllm serve``) and plan, in the rules' order. ``args=None``: the command line is not known
    (a worker process), so only the rules that do not test arguments are evaluated."""
    given = options(args or ())
    return [
        Finding(rule["id"], rule["verdict"], rule["message"].strip())
        for rule in rules
        if (args is not None or not uses_args(rule["when"])) and _holds(rule["when"], env, given, fixes)
    ]


def _leaves(cond: Mapping, where: tuple[str | int, ...] = ()) -> list[tuple[tuple[str | int, ...], Mapping]]:
    """Each env, arg and fix condition inside ``cond``, with its path from ``cond``."""
    for group in _GROUPS:
        if group in cond:
            return [leaf for i, c in enumerate(cond[group]) for leaf in _leaves(c, (*where, group, i))]
    if "not" in cond:
        return _leaves(cond["not"], (*where, "not"))
    return [(where, cond)]


def uses_args(cond: Mapping) -> bool:
    """Whether a condition tests the serve command line (then only the entry point can check it)."""
    return any("arg" in leaf for _, leaf in _leaves(cond))


def names(cond: Mapping) -> list[tuple[str, str, tuple[str | int, ...]]]:
    """What a condition names, in order: (kind, name, path of the key from ``cond``), kind one of
    env (a variable), arg (an option spelling) and fix (a fix id)."""
    out = []
    for where, leaf in _leaves(cond):
        if "arg" in leaf:
            out += [("arg", spelling, (*where, "arg")) for spelling in spellings(leaf)]
        else:
            kind = "env" if "env" in leaf else "fix"
            out.append((kind, leaf[kind], (*where, kind)))
    return out


def refusal(recipe: str | None, finding: Finding) -> str:
    """A finding as one line, the same at the entry point and in every vLLM process: the recipe,
    the rule and its message, quoted."""
    return f'recipe {recipe}, rule {finding.rule}: "{finding.message}"'
