"""The installed distributions fixes edit: found through their metadata (``importlib.metadata``),
never imported.

``--site DIR`` looks only in DIR (a site-packages-like folder with ``*.dist-info``); otherwise the
running interpreter's path is searched. A non-editable install keeps its files beside its
dist-info; an editable one (``direct_url.json`` says ``"editable": true``) keeps them in the
checkout its URL names.
"""

from __future__ import annotations

import importlib.metadata as md
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import unquote, urlparse

from ..core.names import canonical
from ..errors import EnvironmentProblem
from . import commits, confine
from .commits import Commit
from .layout import STATE_DIR_NAME
from .pip_record import sha256_hex

__all__ = ["Distribution", "Environment", "metadata_folders"]

_SUFFIXES = (".dist-info", ".egg-info")


def metadata_folders(name: str, entries: list[str]) -> list[Path]:
    """The metadata folders of distribution ``name`` in the first of ``entries`` where
    importlib.metadata finds it (the first on the path wins, as for imports): one, or more when
    stale installs were left side by side. [] when it is in none of them.

    importlib.metadata finds the distributions but keeps a distribution's folder to itself
    (``PathDistribution._path``; importlib_metadata issues 23 and 111), and fixpack needs it:
    RECORD is rewritten there and the state is keyed on its name. So the folders are read from the
    listing of that one entry, by the name part of each folder's name, as the packaging spec
    names them and importlib.metadata matches them."""
    holding = {Path(str(d.locate_file(""))) for d in md.distributions(name=name, path=entries)}
    entry = next((e for e in entries if Path(e) in holding), None)
    if entry is None:
        return []
    want = canonical(name)
    try:
        children = os.listdir(entry or ".")
    except OSError:
        children = []
    found = [
        Path(entry, child)
        for child in sorted(children)
        if child.lower().endswith(_SUFFIXES) and canonical(child.rpartition(".")[0].partition("-")[0]) == want
    ]
    if not found:
        raise EnvironmentProblem(
            f"{name} in {entry} is not installed in a .dist-info or .egg-info folder (a zip or an egg?): "
            "reinstall it with pip"
        )
    return found


@dataclass
class Distribution:
    name: str  # canonical: "vllm-gaudi"
    package: str  # the import package fixes edit: "vllm_gaudi"
    version: str
    dist_info: Path
    files_root: Path  # where ``<package>/...`` lives: site-packages, or the editable checkout
    editable: bool
    commit: Commit
    installed: md.Distribution = field(repr=False, compare=False)  # importlib.metadata's, of dist_info
    _record: dict[str, str | None] | None = field(default=None, repr=False, compare=False)

    def file(self, path: str) -> Path:
        return confine.inside(self.files_root, path)

    @property
    def site(self) -> Path:
        return self.dist_info.parent

    def record_hash(self, path: str) -> str | None:
        """sha256 (hex) that pip's RECORD gives for ``path``, if it lists one."""
        return self.record_hashes().get(path)

    def record_hashes(self) -> dict[str, str | None]:
        """path -> sha256 (hex; None when it gives none) of every file RECORD lists, in its order;
        {} without a readable RECORD. Only a dist-info has one: for an egg-info importlib.metadata
        lists SOURCES.txt, the sources it was built from, not the files installed."""
        if self._record is None:
            self._record = {}
            if self.dist_info.name.lower().endswith(".dist-info"):
                try:
                    files = self.installed.files or []
                except UnicodeDecodeError:
                    files = []
                for f in files:
                    self._record[f.as_posix()] = sha256_hex(f.hash.mode, f.hash.value) if f.hash else None
        return self._record


def _read_text(installed: md.Distribution, name: str) -> str | None:
    try:
        return installed.read_text(name)
    except UnicodeDecodeError:
        return None


def _editable_root(installed: md.Distribution) -> Path | None:
    info = commits.direct_url(_read_text(installed, "direct_url.json"))
    dir_info = info.get("dir_info")
    if not isinstance(dir_info, dict) or not dir_info.get("editable"):
        return None
    url = urlparse(info.get("url", ""))
    return Path(unquote(url.path)) if url.scheme == "file" else None


def _read(dist_info: Path, package: str) -> Distribution:
    installed = md.Distribution.at(dist_info)
    try:
        # A METADATA that cannot be opened (a folder, no permission) reads as empty: no Name.
        metadata = installed.metadata
    except (UnicodeDecodeError, OSError) as exc:
        raise EnvironmentProblem(f"{dist_info}/METADATA is unreadable ({exc}): reinstall the distribution") from None
    # PackageMetadata is an email.message.Message: .get() answers None for an absent header
    name = metadata["Name"] if metadata is not None and "Name" in metadata else None
    version = metadata["Version"] if metadata is not None and "Version" in metadata else None
    if not name or not version:
        raise EnvironmentProblem(f"{dist_info}/METADATA has no Name or Version: reinstall the distribution")
    editable_root = _editable_root(installed)
    files_root = editable_root or dist_info.parent
    commit = _commit(installed, files_root / package / "_version.py", version, editable_root)
    return Distribution(
        name=canonical(name),
        package=package,
        version=version,
        dist_info=dist_info,
        files_root=files_root,
        editable=editable_root is not None,
        commit=commit,
        installed=installed,
    )


def _commit(installed: md.Distribution, version_py: Path, version: str, editable_root: Path | None) -> Commit:
    unreadable = ""
    try:
        found = commits.from_version_py(version_py)
    except ValueError as exc:
        found, unreadable = None, f"; {version_py} could not be parsed ({exc})"
    if found:
        return Commit(found, f"{version_py.name} __commit_id__")
    found = commits.from_local_version(version)
    if found:
        return Commit(found, "local version label")
    found = commits.from_direct_url(_read_text(installed, "direct_url.json"))
    if found:
        return Commit(found, "direct_url.json vcs_info")
    if editable_root is not None:
        found = commits.from_git_checkout(editable_root)
        if found:
            return Commit(found, f"git checkout {editable_root}")
    return Commit(None, "not recorded in the install" + unreadable)


@dataclass
class Environment:
    """The distributions found, by canonical name, and where fixpack keeps its state for them."""

    site: Path | None
    found: dict[str, Distribution]
    wanted: tuple[str, ...]

    @classmethod
    def read(cls, packages: dict[str, str], site: Path | None = None) -> Environment:
        """Find each distribution of ``packages`` (canonical name -> import package)."""
        if site is not None and not site.is_dir():
            named = "FIXPACK_SITE" if os.environ.get("FIXPACK_SITE") == str(site) else "--site"
            raise EnvironmentProblem(
                f"{named} {site}: no such directory; give the site-packages folder that holds vllm "
                "(python3 -c 'import vllm, os; print(os.path.dirname(os.path.dirname(vllm.__file__)))')",
                path=str(site),
            )
        found: dict[str, Distribution] = {}
        wanted = {canonical(n): pkg for n, pkg in packages.items()}
        entries = list(sys.path) if site is None else [str(site)]
        for name, package in wanted.items():
            dists = metadata_folders(name, entries)
            if not dists:
                continue
            first, twins = dists[0], dists[1:]
            if twins:
                names = ", ".join(p.name for p in (first, *twins))
                raise EnvironmentProblem(
                    f"{first.parent} has {len(twins) + 1} installs of {name} ({names}): "
                    "remove the stale dist-info (pip would not know which one it uninstalls)"
                )
            found[name] = _read(first, package)
        return cls(site, found, tuple(wanted))

    def get(self, name: str) -> Distribution:
        name = canonical(name)
        if name not in self.found:
            where = f"in {self.site}" if self.site else "in this interpreter's path (use --site DIR?)"
            raise EnvironmentProblem(f"distribution {name} is not installed {where}")
        return self.found[name]

    @property
    def state_dir(self) -> Path:
        """``.fixpack`` beside the dist-info of the first distribution (by name) that is installed.

        One place per environment: lock, journal and manifest live there together.
        """
        if self.site is not None:
            return self.site / STATE_DIR_NAME
        for name in sorted(self.wanted):
            if name in self.found:
                return self.found[name].site / STATE_DIR_NAME
        raise EnvironmentProblem(f"none of {', '.join(sorted(self.wanted))} is installed in this interpreter's path")
