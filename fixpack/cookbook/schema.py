"""What each table of the cookbook's files holds, declared once per format as a :class:`Table` of
:class:`Field`\\ s (a key, the kind of value it takes, its default or none when it is required, the
table it nests) and checked one way for all of them: ``fix.toml``, a profile, a recipe and its
``verify`` section. :func:`check` reads a table against its declaration: a misspelt key is refused
(naming the table and the nearest known key, never dropped), then a missing required key, then a
value of the wrong kind; what it returns has every key of the table, absent ones at their default.
:func:`build` makes the model (a ``Fix``, a ``Profile``, a ``Recipe``) from what it returned: each
field names the attribute it fills, so that a new key is its table line and its use, nothing more.
A format's :class:`Spelling` words the messages as its readers read them, TOML's by table and key
(``[upstream]``, ``'title'``), YAML's by dotted path (``hardware.layout``)."""

from __future__ import annotations

import copy
import dataclasses
import re
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from ..core.names import suggest
from . import tomlfile

__all__ = [
    "REQUIRED",
    "Kind",
    "Field",
    "Table",
    "Spelling",
    "TOML",
    "YAML",
    "check",
    "check_keys",
    "attributes",
    "build",
    "read_toml",
    "toml_table",
    "unknown",
    "ANY",
    "LIST",
    "STR",
    "BOOL",
    "DICT",
    "STRINGS",
    "TABLES",
    "MAPPING",
    "ITEMS",
    "TEXTS",
    "TEXT",
    "POSITIVE",
    "POSITIVE_NUMBER",
    "FLAG",
]

Where = tuple[str | int, ...]  # keys and indexes from the file's top to a part of it
Model = TypeVar("Model")
Fail = Callable[[Where, str], Exception]

_BARE = re.compile(r"[A-Za-z0-9_-]+\Z")


class _Required:
    def __repr__(self) -> str:
        return "REQUIRED"


REQUIRED: Any = _Required()  # a Field's default when the key must be given


@dataclass(frozen=True)
class Kind:
    """What a value must be: the words a message ends with (``'x' must be a str``) and the test."""

    name: str
    test: Callable[[Any], bool]


def _strings(value: Any) -> bool:
    return isinstance(value, list) and all(isinstance(v, str) for v in value)


def _positive(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value > 0


ANY = Kind("anything", lambda v: True)  # the loader checks it, in words of its own
LIST = Kind("a list", lambda v: isinstance(v, list))
# TOML's kinds, named as Python names the types (the words fix.toml's errors have always had)
STR = Kind("a str", lambda v: isinstance(v, str))
BOOL = Kind("a bool", lambda v: isinstance(v, bool))
DICT = Kind("a dict", lambda v: isinstance(v, dict))
STRINGS = Kind("a list of strings", _strings)
TABLES = Kind("an array of tables", lambda v: isinstance(v, list) and all(isinstance(e, dict) for e in v))
# YAML's kinds, in the words a recipe's writer reads
MAPPING = Kind("a mapping", lambda v: isinstance(v, dict))
ITEMS = Kind("a non-empty list", lambda v: isinstance(v, list) and bool(v))
TEXTS = Kind("a list of strings", lambda v: isinstance(v, list))  # each a TEXT: an entry's error at its line
TEXT = Kind("a non-empty string (quote it)", lambda v: isinstance(v, str) and bool(v.strip()))
POSITIVE = Kind("a positive integer", _positive)
POSITIVE_NUMBER = Kind("a positive number", lambda v: _positive(v) or isinstance(v, float) and v > 0)
FLAG = Kind("true or false", lambda v: isinstance(v, bool))


@dataclass(frozen=True)
class Field:
    """One key of a table. ``default`` is REQUIRED for a key that must be given; a default of None
    also takes a null (YAML's ``~``) as absent. ``table`` declares the keys of a value that is itself
    a table; ``entries`` what each entry of a list is, or each value of a table keyed by free names
    (``[release."v0.26.0"]``). ``wrong`` replaces the format's message for a value not of its kind,
    where the format's words would not tell the writer what to write."""

    key: str
    kind: Kind = ANY
    default: Any = REQUIRED
    table: Table | None = None
    entries: Table | Kind | None = None
    wrong: str = ""
    # The model's attribute this key fills: "" its key (dashes as underscores); None for a table
    # whose keys fill attributes of their own (a recipe's ``meta``), or a key held in its table's
    # value (a recipe's ``layout`` is one dict).
    attr: str | None = ""

    @property
    def required(self) -> bool:
        return self.default is REQUIRED

    @property
    def attribute(self) -> str | None:
        return self.key.replace("-", "_") if self.attr == "" else self.attr


class Table:
    """The fields of one table, in the order a loader reads them. ``wrong``: the message for an
    entry (of a Field's ``entries``) that is not a table, ``{key}`` its name or index, where the
    format's would not say enough."""

    def __init__(self, *fields: Field, wrong: str = "") -> None:
        self.fields = {f.key: f for f in fields}
        self.wrong = wrong

    @property
    def required(self) -> tuple[str, ...]:
        return tuple(key for key, f in self.fields.items() if f.required)


@dataclass(frozen=True)
class Spelling:
    """How one format's messages name a table (in an unknown key's message), a required key that is
    not there, and a value that is not of its kind; ``mapping`` is the kind of a nested table."""

    table: Callable[[Where], str]
    missing: Callable[[Where, str], str]
    wrong: Callable[[Where, Kind], str]
    mapping: Kind


def toml_table(path: Where) -> str:
    """A TOML table by its path from the top: ``[upstream]``, ``[release."v0.26.0"]``, and an entry of
    an array of tables with its number, ``[[proof.harmless]] #2``."""
    if not path:
        return "the top-level table"
    names = [p if _BARE.match(p) else f'"{p}"' for p in path if isinstance(p, str)]
    dotted = ".".join(names)
    if isinstance(path[-1], int):
        return f"[[{dotted}]] #{path[-1] + 1}"
    return f"[{dotted}]"


def _dotted(where: Where) -> str:
    return ".".join(map(str, where)) or "the document"


TOML = Spelling(
    table=toml_table,
    missing=lambda where, key: f"missing {key!r}",
    wrong=lambda where, kind: f"{where[-1]!r} must be {kind.name}",
    mapping=DICT,
)
YAML = Spelling(
    table=_dotted,
    missing=lambda where, key: f"{_dotted(where)} has no {key!r}",
    wrong=lambda where, kind: f"{_dotted(where)} must be {kind.name}",
    mapping=MAPPING,
)


def unknown(key: str, table: str, known: Collection[str]) -> str:
    """The message for ``key`` in ``table``: the nearest known key, or every known key when none is near."""
    hint = suggest(key, sorted(known)) or f" (known: {', '.join(sorted(known))})"
    return f"unknown key {key!r} in {table}{hint}"


def check_keys(value: Mapping[str, Any], table: Table, where: Where, spelling: Spelling, fail: Fail) -> None:
    """Raise ``fail((*where, key), message)`` for the first key of ``value`` (in the file's order) that
    ``table`` does not have."""
    for key in value:
        if key not in table.fields:
            raise fail((*where, key), unknown(str(key), spelling.table(where), table.fields))


def check(value: Any, table: Table, where: Where, spelling: Spelling, fail: Fail) -> dict[str, Any]:
    """``value``, the table at ``where``, read as ``table`` declares it: its keys, then its required
    keys, then each value's kind, nested tables and entries in turn. Every key of ``table`` is in
    what it returns, an absent one at (a copy of) its default; ``fail(where, message)`` makes the
    error for the part at ``where``."""
    if not isinstance(value, dict):
        raise fail(where, table.wrong.format(key=where[-1]) if table.wrong else spelling.wrong(where, spelling.mapping))
    check_keys(value, table, where, spelling, fail)
    for key in table.required:
        if key not in value:
            raise fail(where, spelling.missing(where, key))
    out: dict[str, Any] = {}
    for key, f in table.fields.items():
        absent = key not in value or (value[key] is None and f.default is None)
        out[key] = copy.copy(f.default) if absent else _value(f, value[key], (*where, key), spelling, fail)
    return out


def _value(f: Field, value: Any, where: Where, spelling: Spelling, fail: Fail) -> Any:
    kind = spelling.mapping if f.table else f.kind
    if not kind.test(value):
        raise fail(where, f.wrong or spelling.wrong(where, kind))
    if f.table:
        return check(value, f.table, where, spelling, fail)
    if f.entries is None:
        return value
    if isinstance(value, list):
        return [_entry(f.entries, v, (*where, i), spelling, fail) for i, v in enumerate(value)]
    return {k: _entry(f.entries, v, (*where, k), spelling, fail) for k, v in value.items()}


def _entry(entries: Table | Kind, value: Any, where: Where, spelling: Spelling, fail: Fail) -> Any:
    if isinstance(entries, Table):
        return check(value, entries, where, spelling, fail)
    if not entries.test(value):
        raise fail(where, spelling.wrong(where, entries))
    return value


def read_toml(path: Path, table: Table) -> dict[str, Any]:
    """The TOML file at ``path``, read and checked against ``table``; any fault is its invalid-file error."""
    return check(tomlfile.read(path), table, (), TOML, lambda where, message: tomlfile.invalid(path, message))


def attributes(table: Table) -> dict[str, Where]:
    """The model attributes ``table``'s keys fill, each with the key's path: through a table whose
    own attribute is None, to its keys."""
    out: dict[str, Where] = {}
    for key, f in table.fields.items():
        if f.attribute is not None:
            out[f.attribute] = (key,)
        elif f.table is not None:
            out.update({name: (key, *where) for name, where in attributes(f.table).items()})
    return out


def build(model: type[Model], table: Table, data: Mapping[str, Any], **read: Any) -> Model:
    """``model`` (a dataclass) from ``data``, what :func:`check` returned for ``table``: each
    attribute a key fills from its value (a list as a tuple), except those the loader ``read`` in its
    own way (checked further, or made of several keys), which it gives here. An attribute of the
    table's that the model lacks is a TypeError naming the key: the table and the model are one
    declaration, and ``tests/test_schema_tables.py`` holds every model to its table."""
    names = {f.name for f in dataclasses.fields(model)}  # type: ignore[arg-type]
    values: dict[str, Any] = {}
    for name, where in attributes(table).items():
        if name not in names:
            raise TypeError(f"{model.__name__} has no attribute {name!r} for the key {'.'.join(map(str, where))}")
        if name not in read:
            value: Any = data
            for key in where:
                value = value[key]
            values[name] = tuple(value) if isinstance(value, list) else value
    return model(**values, **read)
