"""``fixpack sbom --merge FILE``: the pedigree added to another tool's CycloneDX document of the same
environment (``cyclonedx-py environment``'s, say), which fixpack's own document does not replace.

The library reads a document into its model and writes it back its own way (sorted, normalised,
without what it does not model), so the input is kept as parsed JSON and only the parts fixpack
adds are written by the library (in the input's spec version) and grafted in: each pinned
distribution's component, found by purl ignoring qualifiers, else by normalised name and exact
version, gets the ``pedigree``, its patched files (``components``) and the fix set's
``properties``; the runtime check's component is added where the document has none; the serial
number is kept and ``version`` raised by one. Everything else is left as it was parsed."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

from packageurl import PackageURL

from ...core.names import canonical
from ...errors import Refused, UsageError
from ...installation.distributions import Distribution
from .document import SPECS, bom, invalid, purl, render
from .facts import Provenance

__all__ = ["merge"]

MAX_DEPTH = 64  # nesting of the input's JSON; schema validation recurses through it


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    keys = [k for k, _ in pairs]
    twice = sorted({k for k in keys if keys.count(k) > 1})
    if twice:
        raise ValueError(f"the key {twice[0]!r} appears twice in one object")
    return dict(pairs)


def _depth(value: Any) -> int:
    """How deep the JSON value nests (a scalar is 0), without recursion."""
    deepest, stack = 0, [(value, 0)]
    while stack:
        item, depth = stack.pop()
        children = item.values() if isinstance(item, dict) else item if isinstance(item, list) else ()
        for child in children:
            if isinstance(child, (dict, list)):
                stack.append((child, depth + 1))
        deepest = max(deepest, depth + (1 if isinstance(item, (dict, list)) else 0))
    return deepest


def _refs(components: list[Any]) -> set[str]:
    return {c["bom-ref"] for c in _walk(components) if isinstance(c.get("bom-ref"), str)}


def _walk(components: list[Any]) -> Iterator[dict[str, Any]]:
    for c in components:
        if isinstance(c, dict):
            yield c
            yield from _walk(c.get("components") or [])


def _same_package(text: object, want: PackageURL) -> bool:
    if not isinstance(text, str):
        return False
    try:
        found = PackageURL.from_string(text)
    except ValueError:
        return False
    return (found.type, found.namespace, found.name, found.version, found.subpath) == (
        want.type,
        want.namespace,
        want.name,
        want.version,
        want.subpath,
    )


def _find(components: list[Any], dist: Distribution, where: str) -> dict[str, Any]:
    want = purl(dist)
    label = f"{dist.name} {dist.version}"
    found = [c for c in _walk(components) if _same_package(c.get("purl"), want)]
    if not found:
        found = [
            c
            for c in _walk(components)
            if canonical(str(c.get("name", ""))) == dist.name and c.get("version") == dist.version
        ]
        other = [c["purl"] for c in found if c.get("purl") is not None]
        if other:
            raise Refused(
                f"--merge {where}: the component named {label} has purl {other[0]!r}, another package: "
                "the pedigree of this environment's would be grafted onto it"
            )
    for c in found:
        if c.get("version") not in (None, dist.version):
            raise Refused(f"--merge {where}: the component with purl {c.get('purl')!r} says version {c['version']!r}")
    if not found:
        bare = PackageURL(want.type, want.namespace, want.name, want.version).to_string()
        raise Refused(
            f"--merge {where}: no component is {label} (purl {bare} ignoring qualifiers, or that name and "
            "version): is it this environment's SBOM?"
        )
    if len(found) > 1:
        raise Refused(f"--merge {where}: {len(found)} components are {label}: the pedigree would not know its own")
    if "pedigree" in found[0]:
        raise Refused(f"--merge {where}: component {label} already has a pedigree (merged before?)")
    return found[0]


def merge(raw: bytes, where: str, prov: Provenance) -> tuple[str, str]:
    """The merged document's text and its spec version; ``where``: the file's name, for messages."""
    try:
        text = raw.decode("utf-8")
        doc = json.loads(text, object_pairs_hook=_unique_keys)
    except (UnicodeDecodeError, ValueError) as exc:
        raise UsageError(f"--merge {where}: not JSON ({str(exc).splitlines()[0]})", path=where) from None
    except (RecursionError, MemoryError):
        raise UsageError(f"--merge {where}: nested too deep or too large to read", path=where) from None
    if _depth(doc) > MAX_DEPTH:
        raise UsageError(f"--merge {where}: nested more than {MAX_DEPTH} levels deep", path=where)
    if not isinstance(doc, dict) or doc.get("bomFormat") != "CycloneDX":
        raise UsageError(f"--merge {where}: not a CycloneDX document (no bomFormat CycloneDX)", path=where)
    version = doc.get("specVersion")
    spec = SPECS.get(version) if isinstance(version, str) else None
    if spec is None or not isinstance(version, str):
        raise UsageError(
            f"--merge {where}: CycloneDX {version}: fixpack merges into {', '.join(SPECS)} documents", path=where
        )
    problem = invalid(text, spec)
    if problem is not None:
        raise UsageError(f"--merge {where}: not a valid CycloneDX {version} document: {problem}", path=where)
    ours = {c["bom-ref"]: c for c in json.loads(render(bom(prov), spec))["components"]}
    components = doc.setdefault("components", [])
    targets = [_find(components, pd.dist, where) for pd in prov.dists]
    taken = _refs(components) & _refs(list(ours.values()))
    if taken:
        raise Refused(f"--merge {where}: it already uses bom-ref {sorted(taken)[0]!r}, which fixpack adds")
    for pd, target in zip(prov.dists, targets):
        graft = ours[f"fixpack/{pd.dist.name}"]
        target["pedigree"] = graft["pedigree"]
        target["components"] = [*target.get("components", []), *graft.get("components", [])]
        target["properties"] = [*target.get("properties", []), *graft["properties"]]
    check = prov.runtime
    if check is not None and not any(canonical(str(c.get("name", ""))) == check.name for c in _walk(components)):
        components.append(ours[f"fixpack/{check.name}"])
    doc["version"] = int(doc.get("version", 1)) + 1
    return json.dumps(doc, indent=2, ensure_ascii=False) + "\n", version
