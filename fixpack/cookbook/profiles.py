"""``profiles/<release>.toml``: a release's pins, its pack in order and its opt-ins; read into a
:class:`Profile`, and the draft that ``port --write`` starts a new release with."""

from __future__ import annotations

import string
from pathlib import Path
from typing import Any

from ..models import Pin, Profile
from . import schema
from .schema import DICT, LIST, STR, STRINGS, Field, Table
from .tomlfile import invalid, quote

__all__ = ["PROFILE_TABLE", "PIN_TABLE", "load_profile", "draft_profile"]

MATCHES = ("commit", "fingerprints")
PIN_TABLE = Table(
    Field("dist", STR),
    Field("package", STR),
    Field("version", STR),
    Field("commits", STRINGS, []),
    Field("match", STR, "commit"),
    wrong="each [[pin]] must be a table",
)
PROFILE_TABLE = Table(
    Field("release", STR),
    Field("description", STR, ""),
    Field("pack", STRINGS),
    Field("opt_ins", STRINGS, []),
    Field(
        "pin",
        LIST,
        [],
        entries=PIN_TABLE,
        wrong="pins must be [[pin]] tables",
        attr="pins",
    ),
    Field("instead", DICT, {}),
)


def load_profile(path: Path) -> Profile:
    """``profiles/<release>.toml``: checked against PROFILE_TABLE, then read into the :class:`Profile`."""
    data = schema.read_toml(path, PROFILE_TABLE)
    pins = tuple(_pin(raw, i, path) for i, raw in enumerate(data["pin"]))
    if not pins:
        raise invalid(path, "no [[pin]] tables")
    for key in ("dist", "package"):
        names = [getattr(p, key) for p in pins]
        twice = sorted({n for n in names if names.count(n) > 1})
        if twice:
            raise invalid(path, f"two [[pin]] tables have {key} {twice[0]!r}")
    pack, opt_ins = tuple(data["pack"]), tuple(data["opt_ins"])
    if len(set(pack)) != len(pack):
        raise invalid(path, "a fix is listed twice in 'pack'")
    stray = [f for f in opt_ins if f not in pack]
    if stray:
        raise invalid(path, f"opt_ins {stray} are not in 'pack' (give them their slot in pack order)")
    if not all(isinstance(v, str) for v in data["instead"].values()):
        raise invalid(path, "[instead] maps a distribution to the name of the profile to use: strings only")
    return schema.build(
        Profile,
        PROFILE_TABLE,
        data,
        name=path.stem,
        description=data["description"].strip(),
        pins=pins,
        draft=_draft(pins),
        instead=tuple(data["instead"].items()),
    )


def _pin(raw: dict[str, Any], i: int, path: Path) -> Pin:
    if raw["match"] not in MATCHES:
        raise invalid(path, f"[[pin]] #{i + 1}: match must be one of {', '.join(MATCHES)}, not {raw['match']!r}")
    for commit in raw["commits"]:
        if commit != "TODO" and not (7 <= len(commit) <= 40 and all(c in string.hexdigits for c in commit)):
            raise invalid(path, f"[[pin]] #{i + 1}: commit {commit!r} is not a git commit id (7 to 40 hex digits)")
    return schema.build(Pin, PIN_TABLE, raw, commits=tuple(c.lower() for c in raw["commits"]))


def _draft(pins: tuple[Pin, ...]) -> str:
    """Why the pins are not real yet ("pin vllm-gaudi: version TODO"), or ""."""
    todo = []
    for p in pins:
        missing = [
            w
            for w, bad in (
                ("version", p.version.upper() == "TODO"),
                ("commits", p.match == "commit" and not p.commits or "todo" in p.commits),
            )
            if bad
        ]
        if missing:
            todo.append(f"pin {p.dist}: " + " and ".join(f"{w} TODO" for w in missing))
    return "; ".join(todo)


def draft_profile(
    old: Profile, release: str, from_release: str, kept: list[str], left_out: dict[str, str], commits: dict[str, str]
) -> str:
    """The profile ``port --write`` drafts for ``release``: the fixes that ported (``kept``) in pack
    order, those that did not commented out with their reason, and pins for a maintainer to set."""
    lines = [
        f"# Draft written by `fixpack port --from {from_release} --write {release}`: set the pins'",
        "# versions and commits, resolve the fixes commented out below (write their",
        f'# [release."{release}"] changes), then run fixpack lock and fixpack verify on this profile.',
        f"release = {quote(release)}",
        f'description = """\nTODO. Ported from profile {old.name}: {old.description}\n"""',
        "",
        "pack = [",
    ]
    for fid in old.pack:
        if fid in kept:
            lines.append(f"    {quote(fid)},")
        elif fid in left_out:
            lines.append(f"    # {quote(fid)},  # {left_out[fid]}")
    lines.append("]")
    lines.append(f"opt_ins = {quote([f for f in old.opt_ins if f in kept])}")
    for pin in old.pins:
        commit = commits.get(pin.dist, "TODO")
        lines += [
            "",
            "[[pin]]",
            f"dist = {quote(pin.dist)}",
            f"package = {quote(pin.package)}",
            'version = "TODO"',
            f"commits = [{quote(commit)}]"
            + ("" if commit != "TODO" else f"  # {from_release} pinned {', '.join(pin.commits)}"),
        ]
        if pin.match != "commit":
            lines.append(f"match = {quote(pin.match)}")
    return "\n".join(lines) + "\n"
