"""``apply --recipe SLUG [--exec CMD ... | --launch]``: a recipe's fix set applied as ``--profile P
OPT-INS`` would apply it, its rules (the page's "What not to do") checked first.

The rules are evaluated against the plan the apply resolves (before anything is written), an
environment and, when there is one, the ``vllm serve`` command line:

- ``--exec CMD ...``: the real environment (``os.environ``) and CMD's serve arguments: the words
  after the first word named ``vllm`` (any directory) that is followed by ``serve``, so that
  ``vllm serve MODEL ...``, ``/usr/local/bin/vllm serve ...`` and wrappers such as ``numactl ...
  vllm serve ...`` are read; a CMD without ``vllm serve`` gets the rules on the environment and
  the plan only (variables set by a wrapper, as ``env A=1 vllm serve``, are not seen).
- ``--launch``: the recipe's own environment exported over the caller's (the recipe's values
  win, as the page's script does) and the recipe's own serve arguments; CMD is ``vllm serve``
  with them, run in that environment.
- neither: the real environment and the plan (no command line: the rules on it are not checked).

A refusing rule stops the apply before any write: one line that quotes the rule's message and
names the rule and the recipe (``refusal``), exit 1. A warning is a note and the start goes on.
The recipe and its rules on the environment alone are recorded in the manifest (``record``), for
the runtime check in every vLLM process."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ...errors import Refused
from ...runtime import rules as rulebook

if TYPE_CHECKING:  # a --profile apply imports this module: no YAML for it
    from ...cookbook.recipes import Recipe
    from ...models import Plan

__all__ = ["Gate", "serve_words", "differences", "for_exec", "for_launch", "for_apply"]


def serve_words(command: Sequence[str]) -> list[str] | None:
    """The words after ``vllm serve`` in a command line; None when it does not run ``vllm serve``."""
    for i, word in enumerate(command[:-1]):
        if os.path.basename(word) == "vllm" and command[i + 1] == "serve":
            return list(command[i + 2 :])
    return None


def _model(words: Sequence[str]) -> str | None:
    if words and not words[0].startswith("-"):
        return words[0]
    return dict(rulebook.options(words)).get("--model")


def differences(recipe: Recipe, words: Sequence[str]) -> list[str]:
    """How a serve command line differs from the recipe's: the model, and each option missing,
    extra or given another value (the last one given counts, as in vLLM's parser)."""
    out = []
    model = _model(words)
    if model != recipe.serve_model:
        out.append(f"model {model or '(none)'} (recipe: {recipe.serve_model})")
    own = dict(rulebook.options(recipe.argv[1:]))
    given = {k: v for k, v in rulebook.options(words) if k != "--model"}
    missing = [k for k in own if k not in given]
    extra = [k for k in given if k not in own]
    changed = [f"{k} {given[k]} (recipe: {own[k]})" for k in own if k in given and given[k] != own[k]]
    if missing:
        out.append("missing " + " ".join(missing))
    if extra:
        out.append("extra " + " ".join(extra))
    if changed:
        out.append("changed " + ", ".join(changed))
    return out


@dataclass(frozen=True)
class Gate:
    """A recipe's rules, to judge against the plan an apply resolves."""

    recipe: Recipe
    env: Mapping[str, str]
    args: list[str] | None  # the words after ``vllm serve``; None: no serve command line
    launching: bool = False  # a command runs once applied

    def judge(self, plan: Plan) -> list[str]:
        """The notes to print (each warning); Refused, before anything is written, for a refusing rule."""
        findings = rulebook.evaluate(self.recipe.rules, self.env, self.args, {f.id for f in plan.fixes})
        refusing = [f for f in findings if f.verdict == "refuse"]
        if refusing:
            first = refusing[0]
            more = f" (and rule {', '.join(f.rule for f in refusing[1:])})" if refusing[1:] else ""
            what = "nothing was applied" + (", nothing launched" if self.launching else "")
            raise Refused(f"{rulebook.refusal(self.recipe.slug, first)}{more}; {what}")
        return [f"warning: {rulebook.refusal(self.recipe.slug, f)}" for f in findings]

    def kept(self) -> tuple[str, tuple[dict, ...]]:
        """What the manifest keeps of the recipe: its slug and its rules on the environment alone."""
        return self.recipe.slug, tuple(r for r in self.recipe.rules if not rulebook.uses_args(r["when"]))


def for_apply(recipe: Recipe) -> Gate:
    return Gate(recipe, dict(os.environ), None)


def for_exec(recipe: Recipe, command: Sequence[str]) -> tuple[Gate, list[str]]:
    """The gate of ``--exec CMD ...`` and the notes on CMD (not ``vllm serve``; how it differs)."""
    words = serve_words(command)
    if words is None:
        note = f"{command[0]} is not vllm serve: only recipe {recipe.slug}'s rules on the environment and fixes apply"
        return Gate(recipe, dict(os.environ), None, launching=True), [note]
    differ = differences(recipe, words)
    notes = [f"the command differs from recipe {recipe.slug}'s serve arguments: " + "; ".join(differ)] if differ else []
    return Gate(recipe, dict(os.environ), words, launching=True), notes


def for_launch(recipe: Recipe) -> tuple[Gate, list[str], dict[str, str]]:
    """The gate of ``--launch``, the command (``vllm serve`` and the recipe's arguments) and its
    environment: the recipe's exported over this process's."""
    env = {**os.environ, **recipe.env_dict()}
    return Gate(recipe, env, recipe.argv, launching=True), ["vllm", "serve", *recipe.argv], env
