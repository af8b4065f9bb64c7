"""Issue 58: a destination that is neither in place nor an overlay, in this file alone, goes through
every command: apply, its re-run (the full path, then the warm path), status, revert and sbom. A
``Layer`` is a folder laid over site-packages when an image is built: each patched file at its path
in the site, fixpack's state in ``DIR/.fixpack``, no runtime check and nothing put on PYTHONPATH
(processes run it once merged). Its one registration is its ``Where``, ``LayerAt``, which a command
line would choose (``fixpack.cli.options.chosen``); here the commands are called with it.

What it declares is data (``mode``, ``pythonpath``, ``own_files``); what it reads is a ``Shadow``
per patched file (its copy over the installed file) and the release as what the installed files
are recognised against; it writes through fixpack's own transaction, so the warm stamp's lock and
journal (an in-place stamp's: it puts nothing on PYTHONPATH) are its own."""

from __future__ import annotations

import contextlib
import functools
import io
import json
from collections.abc import Iterator, Mapping
from pathlib import Path

import pytest
from cookbooks import targets, three_fixes

from fixpack.cli import render_install
from fixpack.commands.install.apply import ApplyRequest, apply
from fixpack.commands.install.revert import revert
from fixpack.commands.install.stamping import Invocation
from fixpack.commands.install.status import status
from fixpack.cookbook.catalog import Catalog
from fixpack.core.fingerprint import sha256
from fixpack.installation import flock, transaction, warm
from fixpack.installation.destination import Destination, Held, InstalledFile, Placement, Rebuilt, Shadow, Write
from fixpack.installation.distributions import Distribution, Environment
from fixpack.installation.layout import MANIFEST
from fixpack.installation.manifest import Manifest
from fixpack.installation.state import read_file, read_manifest

BUILT = "layer.json"  # path -> the sha256 of the installed file each copy was built over


class Layer:
    mode = "layer"
    pythonpath: Path | None = None
    own_files: tuple[str, ...] = ()

    def __init__(self, root: Path, dists: list[Distribution]) -> None:
        self.root, self.dists = root, dists
        self.state_dir = root / ".fixpack"
        self.where = f"in the layer {root}"
        self.roots = {transaction.STATE: self.state_dir, transaction.SITE: root}

    @contextlib.contextmanager
    def locked(self, create: bool = False) -> Iterator[None]:
        if create:
            self.root.mkdir(parents=True, exist_ok=True)
        if not self.root.is_dir():
            yield
            return
        with flock.locked(self.state_dir):
            yield

    def recover(self) -> str | None:
        return "recovered the layer" if self.root.is_dir() and transaction.recover(self.state_dir, self.roots) else None

    def read(self) -> Held:
        manifest = read_manifest(self.state_dir)
        built = json.loads(read_file(self.state_dir / BUILT) or b"{}")
        by_name = {d.name: d for d in self.dists}
        shadows = {
            path: Shadow(sha256(read_file(self.root / path)), r.applied, by_name[r.dist].file(path), built.get(path))
            for path, r in manifest.files.items()
            if r.dist in by_name
        }
        return Held(manifest, Manifest(), shadows, {})

    def place(
        self,
        files: Mapping[str, InstalledFile],
        rebuilt: Rebuilt,
        new: Manifest,
        old: Manifest,
        dists: Mapping[str, Distribution],
    ) -> Placement:
        writes = [Write(self.root / path, rebuilt.new[path]) for path in new.files]
        writes += [Write(self.root / path, None) for path in old.files if path not in new.files]
        built = {path: sha256(files[path].current) for path in new.files}
        writes.append(Write(self.state_dir / BUILT, json.dumps(built).encode() if built else None))
        expected = {str(self.root / path): r.applied for path, r in new.files.items()}
        expected.update({str(files[path].dist.file(path)): digest for path, digest in built.items()})
        return Placement(tuple(writes), new, self.state_dir / MANIFEST, expected)

    def preflight(self, writes: list[Write]) -> None:
        transaction.preflight(self.state_dir, writes, self.roots)

    def commit(self, writes: list[Write]) -> None:
        if writes:
            self.preflight(writes)
            transaction.commit(self.state_dir, writes, self.roots)


class LayerAt:
    def __init__(self, root: Path, site: Path | None) -> None:
        self.root, self.site = root, site
        self.where = f"in the layer {root}"

    def open(self, env: Environment) -> Destination:
        return Layer(self.root, list(env.found.values()))


@pytest.fixture
def layered(cookbook, site, tmp_path):
    three_fixes(cookbook)
    return Catalog.load(cookbook.root), LayerAt(tmp_path / "layer", site.path)


def _argv(where: LayerAt) -> list[str]:
    return ["--profile", "v0.26.0", "--site", str(where.site), "--layer", str(where.root)]


def test_apply_and_its_re_runs_go_through_the_layer(layered, site):
    catalog, where = layered
    installed = targets(site)
    printer = functools.partial(render_install.printed, as_json=False)
    asked = Invocation(tuple(_argv(where)), printer)
    first = apply(catalog, ApplyRequest("v0.26.0", where=where, invocation=asked))
    assert first.ok and {f.action for f in first.fixes} == {"applied"}, first
    assert targets(site) == installed  # the site is left as it is
    layer_runner = (where.root / "vllm_gaudi" / "runner.py").read_bytes()
    assert b"return 20\n" in layer_runner and b"return 70\n" in layer_runner
    again = apply(catalog, ApplyRequest("v0.26.0", where=where))  # the full path finds it all there
    assert again.ok and {f.action for f in again.fixes} == {"already-applied"}
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        assert warm.try_warm(_argv(where)) == 0  # the warm path, from the stamp the first apply left
    assert out.getvalue() == printer(again)[0]


def test_status_sbom_and_revert_go_through_the_layer(layered, site):
    catalog, where = layered
    assert apply(catalog, ApplyRequest("v0.26.0", where=where)).ok
    st = status(catalog, None, where)
    assert st.profile == "v0.26.0" and {str(state) for _, state in st.fixes} == {"applied"}
    assert st.fix_set is not None and st.drifted == []
    (where.root / "vllm_gaudi" / "batch.py").write_text("edited\n")  # a copy changed: the layer drifts
    st = status(catalog, None, where)
    assert st.fix_set is None and st.drifted == ["vllm_gaudi/batch.py"]
    (where.root / "vllm_gaudi" / "batch.py").unlink()
    again = apply(catalog, ApplyRequest("v0.26.0", where=where))  # built again over the installed files
    assert again.ok and {f.id: str(f.action) for f in again.fixes}["three"] == "applied"
    assert (where.root / "vllm_gaudi" / "batch.py").read_text().endswith("# 3\n")
    revert_all = revert(catalog, (), where)
    assert revert_all.ok and {f.action for f in revert_all.fixes} == {"reverted"}, revert_all
    assert not (where.root / "vllm_gaudi" / "runner.py").exists()
    assert read_manifest(where.root / ".fixpack").empty
    assert apply(catalog, ApplyRequest("v0.26.0", where=where)).ok
    from fixpack.commands.provenance.sbom import sbom

    bom = json.loads(sbom(catalog, where).text)
    fix_set = status(catalog, None, where).fix_set
    assert fix_set is not None
    for component in bom["components"]:  # each pinned distribution, with its patches and the set's properties
        properties = {p["name"]: p["value"] for p in component["properties"]}
        assert properties["fixpack:mode"] == "layer" and properties["fixpack:fix-set"] == fix_set.digest
        assert component["pedigree"]["patches"]
