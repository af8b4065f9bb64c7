"""The distribution finder against importlib.metadata, which it stands in for on the start-up path."""

from __future__ import annotations

import importlib.metadata as md

import pytest

from fixpack.site import finder

METADATA = (
    "Metadata-Version: 2.1\nName: vllm-gaudi\nVersion: 0.26.0\nSummary: a long\n  summary\nName: other\n\nName: body\n"
)


@pytest.mark.parametrize(
    "folders",
    [
        ["vllm_gaudi-0.26.0.dist-info"],
        ["VLLM.Gaudi-0.26.0.dist-info", "vllm_gaudi-0.25.0.dist-info"],
        ["vllm_gaudi.egg-info"],
        ["vllm_gaudi-0.26.0.dist-info", "vllm-0.26.0.dist-info", "vllm_gaudi_extra-1.dist-info"],
    ],
)
def test_find_and_metadata_agree_with_importlib_metadata(tmp_path, folders):
    entries = []
    for n, name in enumerate(folders):  # each in a path entry of its own, and all in one
        for entry in (tmp_path / f"e{n}", tmp_path / "all"):
            (entry / name).mkdir(parents=True)
            meta = "PKG-INFO" if name.endswith(".egg-info") else "METADATA"
            (entry / name / meta).write_text(METADATA.replace("0.26.0", f"0.{n}"))
            if str(entry) not in entries:
                entries.append(str(entry))
    for want in ("vllm-gaudi", "vllm_gaudi", "vllm", "VLLM.gaudi"):
        expected = [str(d._path) for d in md.distributions(name=want, path=entries)]  # type: ignore[attr-defined]
        assert sorted(finder.find(want, entries)) == sorted(expected)
        for found in finder.find(want, entries):
            (dist,) = [d for d in md.distributions(name=want, path=entries) if str(d._path) == found]  # type: ignore[attr-defined]
            fields = finder.metadata(found)
            assert (fields["Name"], fields["Version"]) == (dist.metadata["Name"], dist.version)


def test_metadata_reads_the_headers_only():
    fields = finder._headers(METADATA)
    assert fields["Name"] == "vllm-gaudi"  # the first value, as email.message gives it
    assert fields["Summary"] == "a long summary"
    assert finder.metadata("/nonexistent") == {}
