"""The documentation's generated parts, made from the code they describe when Sphinx reads a page.

A page holds a marker line, ``<!-- fixpack:NAME -->``, that this extension replaces before MyST
parses the page (Sphinx's ``source-read`` event):

- ``commands``: every command's ``--help``, as ``fixpack CMD --help`` prints it without a terminal
  (78 columns), rendered by click from the commands themselves: options, epilogs, the
  ``Environment:`` blocks and ``apply``'s ``--exec`` (parsed outside click, told in its epilog);
- ``environment``: the table of environment variables the CLI renders (``fixpack.cli.environment``),
  with the commands whose help lists each one, and the variables only the tests set;
- ``layers``: the map of the package's layers that ``tests/test_layers.py`` enforces.

``tests/test_docs.py`` compares each with its source.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
# click wraps help to the terminal's width less 2, at most 80 - 2; without a terminal, 80 columns
WIDTH = 78
MARKER = re.compile(r"^<!-- fixpack:(\w+) -->$", re.M)

# What the variables only the tests set do (fixpack.cli.environment.TESTS_ONLY names them; the help
# leaves them out).
TESTS_ONLY_MEANING = {
    "FIXPACK_CRASH_AFTER": "tests only: die right after the N-th durable write of a transaction (the journal, "
    "each backup, each file staged or linked, each rename)",
}


def command_paths() -> list[tuple[str, ...]]:
    """Every command as the words after ``fixpack``: ``()`` for the group itself, then each command
    in the lazy table's order, a group's commands after it."""
    import click

    from fixpack.cli.group import main

    paths: list[tuple[str, ...]] = []

    def walk(command: click.Command, path: tuple[str, ...], ctx: click.Context) -> None:
        paths.append(path)
        if isinstance(command, click.Group):
            for name in command.list_commands(ctx):
                sub = command.get_command(ctx, name)
                assert sub is not None, name
                walk(sub, (*path, name), _context(sub, name, ctx))

    walk(main, (), _context(main, "fixpack", None))
    return paths


def _context(command: Any, name: str, parent: Any) -> Any:
    import click

    settings = dict(command.context_settings)
    if parent is None:
        settings.setdefault("terminal_width", WIDTH)
    return click.Context(command, info_name=name, parent=parent, **settings)


def help_text(path: tuple[str, ...]) -> str:
    """``fixpack PATH --help``'s output (without its final newline), rendered by click."""
    from fixpack.cli.group import main

    command, ctx = main, _context(main, "fixpack", None)
    for name in path:
        command = command.get_command(ctx, name)
        ctx = _context(command, name, ctx)
    return str(ctx.get_help())


def title(path: tuple[str, ...]) -> str:
    return " ".join(("fixpack", *path))


def commands_markdown() -> str:
    """A section per command: its ``--help``, word for word."""
    out = []
    for path in command_paths():
        text = help_text(path)
        fence = "`" * max(3, 1 + max((len(m) for m in re.findall(r"`+", text)), default=0))
        out.append(f"## {title(path)}\n\n{fence}text\n$ {title(path)} --help\n{text}\n{fence}\n")
    return "\n".join(out)


def _help_environment(text: str) -> list[str]:
    """The variables an ``Environment:`` block of a help text lists."""
    block = text.split("Environment:\n", 1)[1] if "Environment:\n" in text else ""
    names = []
    for line in block.splitlines():
        match = re.match(r"^ +(FIXPACK_\w+)  ", line)
        if not match:
            break
        names.append(match.group(1))
    return names


def environment_rows() -> list[tuple[str, str, str]]:
    """(variable, meaning, where the help lists it) for every variable fixpack reads, in the CLI's
    order, then those only the tests set."""
    from fixpack.cli.environment import TESTS_ONLY, VARIABLES

    shown: dict[str, list[str]] = {name: [] for name in VARIABLES}
    for path in command_paths():
        for name in _help_environment(help_text(path)):
            shown[name].append(f"`{title(path)} --help`")
    rows = [(name, meaning, ", ".join(shown[name])) for name, meaning in VARIABLES.items()]
    missing = [name for name in TESTS_ONLY if name not in TESTS_ONLY_MEANING]
    if missing:
        raise ValueError(f"docs/_ext/fixpack_docs.py: say what {', '.join(missing)} does (TESTS_ONLY_MEANING)")
    return rows + [(name, TESTS_ONLY_MEANING[name], "(none: the tests set it)") for name in TESTS_ONLY]


def environment_markdown() -> str:
    lines = ["| variable | meaning | listed by |", "|---|---|---|"]
    lines += [f"| `{name}` | {_cell(meaning)} | {where} |" for name, meaning, where in environment_rows()]
    return "\n".join(lines) + "\n"


def layers() -> tuple[dict[str, set[str]], set[str]]:
    """``ALLOWED`` and ``WARM_PATH`` as tests/test_layers.py holds them (read, not imported)."""
    tree = ast.parse((ROOT / "tests" / "test_layers.py").read_text(encoding="utf-8"))
    found: dict[str, Any] = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            if node.targets[0].id in ("ALLOWED", "WARM_PATH"):
                found[node.targets[0].id] = ast.literal_eval(node.value)
    return found["ALLOWED"], found["WARM_PATH"]


def layers_markdown() -> str:
    allowed, warm = layers()
    lines = ["| layer | may import (besides itself) |", "|---|---|"]
    for layer, others in allowed.items():
        names = ", ".join(f"`{o}`" for o in sorted(others - {layer}))
        lines.append(f"| `{layer}` | {names or 'nothing else of fixpack'} |")
    lines.append("")
    lines.append(
        "The warm path, which runs before anything else is imported, is "
        + ", ".join(f"`{m}`" for m in sorted(warm))
        + ": the standard library and these modules only."
    )
    return "\n".join(lines) + "\n"


def _cell(text: str) -> str:
    """Text for a Markdown table cell: option names and paths as code."""
    return re.sub(r"(--[\w-]+|~?[\w.-]*/[\w./-]*)", r"`\1`", text).replace("|", "\\|")


GENERATED = {"commands": commands_markdown, "environment": environment_markdown, "layers": layers_markdown}


def expand(text: str) -> str:
    """A page's source with each marker replaced by what it names."""

    def one(match: re.Match[str]) -> str:
        name = match.group(1)
        if name not in GENERATED:
            raise ValueError(f"unknown generated part {name!r} (known: {', '.join(GENERATED)})")
        return GENERATED[name]()

    return MARKER.sub(one, text)


def markers(text: str) -> Iterator[str]:
    return iter(MARKER.findall(text))


def _source_read(app: Any, docname: str, source: list[str]) -> None:
    source[0] = expand(source[0])


def _outdated(app: Any, env: Any, added: set[str], changed: set[str], removed: set[str]) -> list[str]:
    """The pages with a generated part are read again at every build: the code they come from may
    have changed while the page did not."""
    return [
        name
        for name in env.found_docs
        if name not in removed and MARKER.search(Path(env.doc2path(name)).read_text(encoding="utf-8"))
    ]


def setup(app: Any) -> dict[str, Any]:
    app.connect("source-read", _source_read)
    app.connect("env-get-outdated", _outdated)
    return {"version": "1", "parallel_read_safe": True, "parallel_write_safe": True}
