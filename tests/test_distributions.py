"""Finding the installed distributions through importlib.metadata: which folder, which path entry,
which name, what METADATA and RECORD say, and the one-line refusals of what cannot be read."""

from __future__ import annotations

import hashlib
import importlib.metadata as md
import sys
import zipfile
from pathlib import Path

import pytest

from fixpack.errors import EnvironmentProblem
from fixpack.installation import plugin
from fixpack.installation.distributions import Environment, metadata_folders
from fixpack.installation.pip_record import render_record, row_for

PACKAGES = {"vllm": "vllm", "vllm-gaudi": "vllm_gaudi"}
METADATA = (
    "Metadata-Version: 2.1\nName: vllm-gaudi\nVersion: 0.26.0\nSummary: a long\n  summary\nName: other\n\nName: body\n"
)


def install(
    entry: Path, folder: str, version: str = "0.26.0", name: str = "vllm-gaudi", extra: dict[str, bytes] | None = None
) -> Path:
    """A metadata folder in ``entry``: METADATA (PKG-INFO for an egg-info) and ``extra`` files."""
    meta = entry / folder
    meta.mkdir(parents=True)
    text = METADATA.replace("0.26.0", version).replace("vllm-gaudi", name)
    (meta / ("PKG-INFO" if folder.endswith(".egg-info") else "METADATA")).write_text(text)
    for file, content in (extra or {}).items():
        (meta / file).write_bytes(content)
    return meta


@pytest.mark.parametrize(
    "folders",
    [
        ["vllm_gaudi-0.26.0.dist-info"],
        ["VLLM.Gaudi-0.26.0.dist-info", "vllm_gaudi-0.25.0.dist-info"],
        ["vllm_gaudi.egg-info"],
        ["vllm_gaudi-0.26.0.dist-info", "vllm-0.26.0.dist-info", "vllm_gaudi_extra-1.dist-info"],
    ],
)
def test_the_folders_are_those_importlib_metadata_finds(tmp_path, folders):
    entries = []
    for n, folder in enumerate(folders):  # each in a path entry of its own, and all in one
        for entry in (tmp_path / f"e{n}", tmp_path / "all"):
            install(entry, folder, version=f"0.{n}")
            if str(entry) not in entries:
                entries.append(str(entry))
    for want in ("vllm-gaudi", "vllm_gaudi", "vllm", "VLLM.gaudi"):
        found = metadata_folders(want, entries)
        ours = sorted(md.Distribution.at(f).version for f in found)
        if not found:
            assert list(md.distributions(name=want, path=entries)) == []
            continue
        (entry,) = {f.parent for f in found}
        theirs = sorted(d.version for d in md.distributions(name=want, path=[str(entry)]))
        assert ours == theirs, want
        # the first entry importlib.metadata finds it in
        assert entry == Path(str(next(iter(md.distributions(name=want, path=entries))).locate_file("")))


def test_names_are_normalized_as_pep_503_says(tmp_path):
    folder = install(tmp_path, "VLLM.Gaudi-0.26.0.dist-info")
    install(tmp_path, "vllm_gaudi_extra-1.dist-info", name="vllm-gaudi-extra")
    for name in ("vllm-gaudi", "vllm_gaudi", "VLLM.Gaudi", "vllm..gaudi"):
        assert metadata_folders(name, [str(tmp_path)]) == [folder]
    assert metadata_folders("vllm", [str(tmp_path)]) == []


def test_the_first_path_entry_holding_it_wins(tmp_path, monkeypatch):
    first = install(tmp_path / "a", "vllm_gaudi-0.27.0.dist-info", version="0.27.0")
    install(tmp_path / "b", "vllm_gaudi-0.26.0.dist-info")
    entries = [str(tmp_path / "empty"), str(tmp_path / "a"), str(tmp_path / "b")]
    assert metadata_folders("vllm-gaudi", entries) == [first]
    monkeypatch.setattr(sys, "path", entries)
    env = Environment.read(PACKAGES)
    assert env.get("vllm_gaudi").dist_info == first and env.get("vllm-gaudi").version == "0.27.0"


def test_a_relative_path_entry_is_the_current_folder(tmp_path, monkeypatch):
    install(tmp_path, "vllm_gaudi-0.26.0.dist-info")
    monkeypatch.chdir(tmp_path)
    assert metadata_folders("vllm-gaudi", [""]) == [Path("vllm_gaudi-0.26.0.dist-info")]


def test_site_searches_only_that_folder(tmp_path, monkeypatch):
    install(tmp_path / "elsewhere", "vllm-0.26.0.dist-info", name="vllm")
    install(tmp_path / "site", "vllm_gaudi-0.26.0.dist-info")
    monkeypatch.setattr(sys, "path", [str(tmp_path / "elsewhere"), *sys.path])
    env = Environment.read(PACKAGES, site=tmp_path / "site")
    assert sorted(env.found) == ["vllm-gaudi"]
    with pytest.raises(EnvironmentProblem, match=f"distribution vllm is not installed in {tmp_path / 'site'}"):
        env.get("vllm")


def test_two_installs_in_one_entry_are_refused_and_in_two_entries_the_first_wins(tmp_path):
    a = install(tmp_path / "a", "vllm_gaudi-0.26.0.dist-info")
    b = install(tmp_path / "a", "vllm_gaudi-0.25.0.dist-info", version="0.25.0")
    install(tmp_path / "b", "vllm_gaudi-0.24.0.dist-info", version="0.24.0")
    assert metadata_folders("vllm-gaudi", [str(tmp_path / "a"), str(tmp_path / "b")]) == [b, a]
    with pytest.raises(EnvironmentProblem, match="has 2 installs of vllm-gaudi"):
        Environment.read(PACKAGES, site=tmp_path / "a")
    assert Environment.read(PACKAGES, site=tmp_path / "b").get("vllm-gaudi").version == "0.24.0"


def test_metadata_gives_each_headers_first_value(tmp_path):
    install(tmp_path, "vllm_gaudi-0.26.0.dist-info")
    dist = Environment.read(PACKAGES, site=tmp_path).get("vllm-gaudi")
    assert (dist.name, dist.version) == ("vllm-gaudi", "0.26.0")  # not "other", nor the body's "body"
    assert dist.installed.metadata["Summary"].split() == ["a", "long", "summary"]


def test_an_egg_info_is_read_from_its_pkg_info(tmp_path):
    install(tmp_path, "vllm_gaudi.egg-info", version="0.26.0", extra={"SOURCES.txt": b"vllm_gaudi/runner.py\n"})
    dist = Environment.read(PACKAGES, site=tmp_path).get("vllm-gaudi")
    assert (dist.version, dist.dist_info.name) == ("0.26.0", "vllm_gaudi.egg-info")
    assert dist.record_hashes() == {}  # SOURCES.txt lists sources, not what was installed


@pytest.mark.parametrize(
    ("metadata", "words"),
    [
        (b"", "has no Name or Version"),
        (b"Name: vllm-gaudi\n", "has no Name or Version"),
        (None, "has no Name or Version"),  # a folder where METADATA should be: nothing readable
        (b"Name: vllm-gaudi\nVersion: 0.26.0\nSummary: \xff\xfe\n", "is unreadable"),
    ],
)
def test_metadata_that_cannot_be_used_is_one_environment_problem(tmp_path, metadata, words):
    folder = tmp_path / "vllm_gaudi-0.26.0.dist-info"
    if metadata is None:
        (folder / "METADATA").mkdir(parents=True)
    else:
        folder.mkdir()
        (folder / "METADATA").write_bytes(metadata)
    with pytest.raises(EnvironmentProblem, match=words) as caught:
        Environment.read(PACKAGES, site=tmp_path)
    assert str(folder / "METADATA") in str(caught.value) and "\n" not in str(caught.value)


def test_a_distribution_in_a_zip_on_the_path_is_refused(tmp_path):
    archive = tmp_path / "vllm_gaudi.zip"
    with zipfile.ZipFile(archive, "w") as zf:
        zf.writestr("vllm_gaudi-0.26.0.dist-info/METADATA", METADATA)
    assert [d.version for d in md.distributions(name="vllm-gaudi", path=[str(archive)])] == ["0.26.0"]
    with pytest.raises(EnvironmentProblem, match="not installed in a .dist-info or .egg-info folder"):
        metadata_folders("vllm-gaudi", [str(archive), str(tmp_path)])


def test_record_is_read_through_importlib_metadata(tmp_path):
    runner = b"X = 1\n"
    rows = [row_for("vllm_gaudi/runner.py", runner), row_for("vllm_gaudi/a,b.py", b"")]
    rows += [("vllm_gaudi/__pycache__/runner.cpython-311.pyc", "", ""), ("vllm_gaudi-0.26.0.dist-info/RECORD", "", "")]
    install(tmp_path, "vllm_gaudi-0.26.0.dist-info", extra={"RECORD": render_record(rows)})
    dist = Environment.read(PACKAGES, site=tmp_path).get("vllm-gaudi")
    assert dist.record_hashes() == {
        "vllm_gaudi/runner.py": hashlib.sha256(runner).hexdigest(),
        "vllm_gaudi/a,b.py": hashlib.sha256(b"").hexdigest(),  # csv: the quoted comma is one field
        "vllm_gaudi/__pycache__/runner.cpython-311.pyc": None,
        "vllm_gaudi-0.26.0.dist-info/RECORD": None,
    }
    assert dist.record_hash("vllm_gaudi/runner.py") == hashlib.sha256(runner).hexdigest()
    assert dist.record_hash("vllm_gaudi/other.py") is None


def test_a_record_that_is_not_utf8_lists_nothing(tmp_path):
    install(tmp_path, "vllm_gaudi-0.26.0.dist-info", extra={"RECORD": b"vllm_gaudi/\xff.py,sha256=AAAA,1\n"})
    assert Environment.read(PACKAGES, site=tmp_path).get("vllm-gaudi").record_hashes() == {}


def test_direct_url_that_is_not_utf8_is_not_an_editable_install(tmp_path):
    install(
        tmp_path,
        "vllm_gaudi-0.26.0.dist-info",
        extra={"direct_url.json": b'{"url": "file:///\xff", "dir_info": {"editable": true}}'},
    )
    dist = Environment.read(PACKAGES, site=tmp_path).get("vllm-gaudi")
    assert not dist.editable and dist.files_root == tmp_path


def test_the_runtime_checks_entry_point_and_files_are_what_importlib_metadata_reads(tmp_path):
    for rel, content in plugin.files(b"{}\n").items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_bytes(content)
    (dist,) = md.distributions(name=plugin.NAME, path=[str(tmp_path)])
    (ep,) = dist.entry_points.select(group=plugin.GROUP)
    assert (ep.name, ep.value) == (plugin.PACKAGE, f"{plugin.PACKAGE}:check")
    on_disk = {p.relative_to(tmp_path).as_posix() for p in tmp_path.rglob("*") if p.is_file()}
    assert {f.as_posix() for f in dist.files or []} == on_disk
    assert all(f.hash is not None for f in dist.files or [] if f.name != "RECORD")
