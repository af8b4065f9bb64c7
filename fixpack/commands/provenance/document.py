"""The CycloneDX document of what a site has applied (``facts.Provenance``), built and validated
with cyclonedx-python-lib. Only ``fixpack sbom`` imports this module: apply, the warm path and the
runtime check never load the library.

Each pinned distribution is a component (name, version as installed, a purl: ``pkg:pypi/vllm@0.26.0``,
a local label kept, ``pkg:pypi/vllm@0.26.0%2Bcpu``; vllm-gaudi, not on PyPI,
``pkg:github/vllm-project/vllm-gaudi@v0.26.0``; the commit fixpack read, when it read one, as the
purl's ``vcs_url`` qualifier), with ``pedigree.ancestors`` the build as installed before the fixes
and ``pedigree.patches`` one patch per fix that changed it (its diff as ``fixpack diff`` prints it,
its type and what it resolves: see ``facts``), its patched files as ``file`` components with their
sha256, and the fix set as properties (``fixpack:fix-set`` the digest ``fixpack status`` prints,
``fixpack:profile``, ``fixpack:release``, ``fixpack:opt-ins``, ``fixpack:fixes`` in the order
applied, ``fixpack:mode``, and ``fixpack:vulnerabilities``: no fix resolves a CVE). The runtime
check's distribution is a component of its own, with its modules' hashes.

The same site gives the same bytes: every component has a bom-ref of its own (``fixpack/...``),
the serial number is a UUID 5 of the document's canonical JSON without it (keys sorted, no
whitespace), the timestamp is ``SOURCE_DATE_EPOCH``'s or left out, and the library sorts
components, patches and properties itself."""

from __future__ import annotations

import json
import uuid
from datetime import datetime

from cyclonedx.model import AttachedText, HashAlgorithm, HashType, Property, XsUri
from cyclonedx.model.bom import Bom, BomMetaData
from cyclonedx.model.component import Component, ComponentType, Diff, Patch, PatchClassification, Pedigree
from cyclonedx.model.issue import IssueClassification, IssueType
from cyclonedx.model.tool import ToolRepository
from cyclonedx.output import make_outputter
from cyclonedx.schema import OutputFormat, SchemaVersion
from cyclonedx.validation.json import JsonStrictValidator
from packageurl import PackageURL

from ... import __version__
from ...installation.distributions import Distribution
from .facts import REPOSITORIES, AppliedPatch, PatchedDist, Provenance, RuntimeCheck

__all__ = ["SPECS", "NO_CVE", "purl", "bom", "render", "invalid"]

SPECS = {"1.5": SchemaVersion.V1_5, "1.6": SchemaVersion.V1_6, "1.7": SchemaVersion.V1_7}
SERIAL_NAMESPACE = uuid.uuid5(uuid.NAMESPACE_URL, "fixpack:sbom")
NO_CVE = (
    "none: no fix of this set resolves a CVE or other vulnerability; each patch resolves a defect, "
    "and the stock release's vulnerability verdicts stand"
)


def purl(dist: Distribution) -> PackageURL:
    """The distribution's package URL, the commit read as its ``vcs_url`` qualifier."""
    repo = REPOSITORIES.get(dist.name)
    commit = dist.commit.id
    qualifiers = {"vcs_url": f"git+https://github.com/{repo}@{commit}"} if repo and commit else None
    if dist.name == "vllm-gaudi":  # not on PyPI: its repository, at the release's tag
        return PackageURL("github", "vllm-project", "vllm-gaudi", f"v{dist.version}", qualifiers)
    return PackageURL("pypi", None, dist.name, dist.version, qualifiers)


def _files(owner: str, rows: tuple[tuple[str, str], ...]) -> list[Component]:
    return [
        Component(
            type=ComponentType.FILE,
            name=path,
            hashes=[HashType(alg=HashAlgorithm.SHA_256, content=digest)],
            bom_ref=f"{owner}/file/{path}",
        )
        for path, digest in rows
    ]


def _patch(p: AppliedPatch) -> Patch:
    return Patch(
        type=PatchClassification(p.type),
        diff=Diff(text=AttachedText(content=p.diff, content_type="text/x-diff")),
        resolves=[
            IssueType(
                type=IssueClassification.DEFECT,
                id=i.id,
                name=i.name,
                description=i.description,
                references=[XsUri(u) for u in i.references],
            )
            for i in p.resolves
        ],
    )


def _properties(prov: Provenance) -> list[Property]:
    values = {
        "fixpack:fix-set": prov.fix_set.digest,
        "fixpack:profile": prov.profile,
        "fixpack:release": prov.release,
        "fixpack:opt-ins": ", ".join(prov.opt_ins) or "none",
        "fixpack:fixes": ", ".join(prov.fix_set.fixes),
        "fixpack:mode": prov.mode,
        "fixpack:vulnerabilities": NO_CVE,
    }
    return [Property(name=k, value=v) for k, v in values.items()]


def _distribution(pd: PatchedDist, prov: Provenance) -> Component:
    d = pd.dist
    ref = f"fixpack/{d.name}"
    stock = Component(
        name=d.name,
        version=d.version,
        purl=purl(d),
        bom_ref=f"{ref}/stock",
        description=f"{d.name} {d.version} as installed, before fixpack's fixes",
    )
    return Component(
        name=d.name,
        version=d.version,
        purl=purl(d),
        bom_ref=ref,
        description=f"{d.name} {d.version} with {len(pd.patches)} of fixpack's fixes (profile {prov.profile})",
        pedigree=Pedigree(ancestors=[stock], patches=[_patch(p) for p in pd.patches]),
        components=_files(ref, pd.files),
        properties=_properties(prov),
    )


def _runtime(check: RuntimeCheck, mode: str) -> Component:
    ref = f"fixpack/{check.name}"
    where = "inside the overlay" if mode == "overlay" else "beside the patched distributions"
    return Component(
        name=check.name,
        version=check.version,
        bom_ref=ref,
        description=f"fixpack's runtime check, a vLLM general plugin installed {where} by fixpack apply: every "
        "vLLM process checks that it runs the files fixpack patched",
        components=_files(ref, check.files),
    )


def bom(prov: Provenance, timestamp: datetime | None = None) -> Bom:
    """The document: each pinned distribution and the runtime check, fixpack as the tool."""
    tool = Component(type=ComponentType.APPLICATION, name="fixpack", version=__version__, bom_ref="fixpack/tool")
    metadata = BomMetaData(tools=ToolRepository(components=[tool]))
    # The library stamps the time of the run unless told one; None (no timestamp) is what a
    # reproducible document without SOURCE_DATE_EPOCH needs, which its annotations do not list.
    metadata.timestamp = timestamp  # type: ignore[assignment]
    components = [_distribution(pd, prov) for pd in prov.dists]
    if prov.runtime is not None:
        components.append(_runtime(prov.runtime, prov.mode))
    return Bom(components=components, metadata=metadata, serial_number=uuid.UUID(int=0))


def _output(document: Bom, spec: SchemaVersion) -> str:
    return make_outputter(document, OutputFormat.JSON, spec).output_as_string(indent=2) + "\n"


def render(document: Bom, spec: SchemaVersion = SchemaVersion.V1_6) -> str:
    """The JSON text, its serial number a UUID 5 of its own canonical content without it."""
    document.serial_number = uuid.UUID(int=0)
    draft = json.loads(_output(document, spec))
    draft.pop("serialNumber", None)
    canonical = json.dumps(draft, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    document.serial_number = uuid.uuid5(SERIAL_NAMESPACE, canonical)
    return _output(document, spec)


def invalid(text: str, spec: SchemaVersion) -> str | None:
    """Why ``text`` is not a valid CycloneDX document of ``spec`` (the first error, one line); None if it is."""
    error = JsonStrictValidator(spec).validate_str(text)
    if error is None:
        return None
    data = error.data
    where = "/".join(str(p) for p in getattr(data, "absolute_path", ()))
    message = str(getattr(data, "message", data)).splitlines()[0]
    return f"{message} (at /{where})" if where else message
