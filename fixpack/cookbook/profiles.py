"""``profiles/<release>.toml``: a release's pins, its pack in order and its opt-ins; read into a
:class:`Profile`, and the draft that ``port --write`` starts a new release with."""

from __future__ import annotations

from pathlib import Path

from ..models import Pin, Profile
from . import schema, tomlfile
from .tomlfile import field, invalid, quote

__all__ = ["load_profile", "draft_profile"]

# The keys of a profile and of each [[pin]] (schema.toml_keys refuses any other)
KEYS = {"release", "description", "pack", "opt_ins", "pin", "instead"}
PIN_KEYS = {"dist", "package", "version", "commits", "match"}
MATCHES = ("commit", "fingerprints")


def load_profile(path: Path) -> Profile:
    data = tomlfile.read(path)
    schema.toml_keys(data, KEYS, path)
    pins = []
    raw_pins = data.get("pin", [])
    if not isinstance(raw_pins, list):
        raise invalid(path, "pins must be [[pin]] tables")
    for i, raw in enumerate(raw_pins):
        if not isinstance(raw, dict):
            raise invalid(path, "each [[pin]] must be a table")
        schema.toml_keys(raw, PIN_KEYS, path, "pin", i)
        match = field(raw, "match", str, path, "commit")
        if match not in MATCHES:
            raise invalid(path, f"[[pin]] #{i + 1}: match must be one of {', '.join(MATCHES)}, not {match!r}")
        pins.append(
            Pin(
                dist=field(raw, "dist", str, path),
                package=field(raw, "package", str, path),
                version=field(raw, "version", str, path),
                commits=tuple(c.lower() for c in field(raw, "commits", list, path, [])),
                match=match,
            )
        )
    if not pins:
        raise invalid(path, "no [[pin]] tables")
    pack = tuple(field(data, "pack", list, path))
    opt_ins = tuple(field(data, "opt_ins", list, path, []))
    if len(set(pack)) != len(pack):
        raise invalid(path, "a fix is listed twice in 'pack'")
    stray = [f for f in opt_ins if f not in pack]
    if stray:
        raise invalid(path, f"opt_ins {stray} are not in 'pack' (give them their slot in pack order)")
    instead = field(data, "instead", dict, path, {})
    if not all(isinstance(v, str) for v in instead.values()):
        raise invalid(path, "[instead] maps a distribution to the name of the profile to use: strings only")
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
    return Profile(
        name=path.stem,
        release=field(data, "release", str, path),
        description=field(data, "description", str, path, "").strip(),
        pins=tuple(pins),
        pack=pack,
        opt_ins=opt_ins,
        draft="; ".join(todo),
        instead=tuple(instead.items()),
    )


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
