"""``fixpack sbom``: the installed state as a CycloneDX 1.6 document, each applied fix a patch in its
distribution's pedigree (the diff ``fixpack diff`` prints, its type from ``[upstream]``), the same
bytes for the same site, in place and in an overlay; ``--merge`` onto another tool's document; bad
input refused in one line, nothing written; and apply, the warm path and the runtime check never
import cyclonedx."""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from builders import BATCH, REPO, RUNNER, SAMPLER
from runs import LOAD, apply_all, py, took_fast_path

from fixpack.commands.provenance.facts import BACKPORT, CHERRY_PICK, UNOFFICIAL, issues, patch_type, url
from fixpack.models import Fix, Proof, Upstream

pytest.importorskip("cyclonedx", reason="fixpack's sbom extra (cyclonedx-python-lib) is not installed")

from cyclonedx.schema import SchemaVersion  # noqa: E402
from cyclonedx.validation.json import JsonStrictValidator  # noqa: E402

OPT_INS = ("alpha", "beta")
FIRST = RUNNER.replace("return 2\n", "return 20\n")
# fix -> its [upstream] table, and the patch type the rule gives it
UPSTREAM = {
    "one": ('forwarded = "no"\nbug = ["vllm-project/vllm#100"]', UNOFFICIAL),
    "two": ('origin = "vllm-project/vllm-gaudi@c8d890911774c6d88f70a6b5be253e091f93057f"\nbug = []', BACKPORT),
    "alpha": ('forwarded = "not-needed"\norigin = "vllm-project/vllm-gaudi#1731"', CHERRY_PICK),
    "beta": ('origin = "vllm-project/vllm-gaudi#1466"\nregressed-in = "v0.24.0rc0"', CHERRY_PICK),
}


def pack(cookbook) -> None:
    """``one`` (both distributions, a bug reported), ``two`` (requires one: the same file after it, a
    backport of a commit); opt-ins ``alpha`` (a pull request's) and ``beta`` (a new module, from a
    release branch main lost)."""
    cookbook.fix(
        "one", {"vllm_gaudi/runner.py": (RUNNER, FIRST), "vllm/sampler.py": (SAMPLER, SAMPLER.replace("x\n", "-x\n"))}
    )
    cookbook.fix(
        "two", {"vllm_gaudi/runner.py": (FIRST, FIRST.replace("return 7\n", "return 70\n"))}, requires=("one",)
    )
    cookbook.fix("alpha", {"vllm_gaudi/batch.py": (BATCH, BATCH + "# alpha\n")}, opt_in=True)
    cookbook.fix("beta", {"vllm_gaudi/new_module.py": (None, "VALUE = 3\n")}, opt_in=True)
    for fix_id, (table, _) in UPSTREAM.items():
        toml = cookbook.root / "fixes" / fix_id / "fix.toml"
        toml.write_text(toml.read_text().replace('[upstream]\nstatus = "pending"\n', f"[upstream]\n{table}\n"))
    cookbook.profile(["one", "two", "alpha", "beta"], list(OPT_INS))
    cookbook.lock()


def apply(cli, site_path: Path, *extra: str) -> None:
    r = cli("apply", "--profile", "v0.26.0", "--site", str(site_path), *OPT_INS, *extra)
    assert r.exit_code == 0, r.output


def sbom(cli, site_path: Path, *extra: str) -> str:
    r = cli("sbom", "--site", str(site_path), *extra)
    assert r.exit_code == 0, r.output
    assert r.stderr.startswith("fixpack: sbom: CycloneDX"), r.stderr
    return r.stdout


def valid(text: str, spec: SchemaVersion = SchemaVersion.V1_6) -> dict:
    error = JsonStrictValidator(spec).validate_str(text)
    assert error is None, error
    return json.loads(text)


def refused(r, code: int) -> str:
    """A failure as the contract has it: the exit code, one line on stderr, nothing on stdout."""
    assert r.exit_code == code, r.output
    lines = r.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("fixpack: error: "), r.stderr
    assert r.stdout == ""
    return lines[0]


def components(doc: dict) -> dict[str, dict]:
    return {c["name"]: c for c in doc["components"]}


def properties(component: dict) -> dict[str, str]:
    return {p["name"]: p["value"] for p in component["properties"]}


def fix_of(patch: dict) -> str:
    """The fix a patch is: each issue it resolves names it."""
    return re.search(r"fixpack fix (\S+):", patch["resolves"][0]["description"]).group(1)


@pytest.fixture
def applied(cookbook, site, cli):
    pack(cookbook)
    apply(cli, site.path)
    return site


# -- the document -----------------------------------------------------------------------------------


def test_the_document_is_valid_1_6_with_each_fix_a_patch_of_the_distribution_it_changed(applied, cli):
    doc = valid(sbom(cli, applied.path))
    assert doc["specVersion"] == "1.6" and "timestamp" not in doc["metadata"]
    tools = doc["metadata"]["tools"]["components"]
    assert [(t["name"], t["bom-ref"]) for t in tools] == [("fixpack", "fixpack/tool")]
    found = components(doc)
    assert set(found) == {"vllm", "vllm-gaudi", "fixpack-runtime-check"}
    vllm, gaudi = found["vllm"], found["vllm-gaudi"]
    assert vllm["purl"] == "pkg:pypi/vllm@0.26.0?vcs_url=git%2Bhttps://github.com/vllm-project/vllm%40568afb3a1"
    assert gaudi["purl"].startswith("pkg:github/vllm-project/vllm-gaudi@v0.26.0?vcs_url=")
    assert gaudi["purl"].endswith("vllm-project/vllm-gaudi%40b059f9c95")  # as _version.py abbreviates it
    for component in (vllm, gaudi):
        (stock,) = component["pedigree"]["ancestors"]
        assert (stock["name"], stock["version"], stock["purl"]) == (component["name"], "0.26.0", component["purl"])
    patches = {(fix_of(p), name): p for name in ("vllm", "vllm-gaudi") for p in found[name]["pedigree"]["patches"]}
    assert sorted(patches) == [
        ("alpha", "vllm-gaudi"), ("beta", "vllm-gaudi"), ("one", "vllm"), ("one", "vllm-gaudi"), ("two", "vllm-gaudi"),
    ]  # fmt: skip
    for (fix_id, _), patch in patches.items():
        assert patch["type"] == UPSTREAM[fix_id][1], fix_id
        assert patch["diff"]["text"]["contentType"] == "text/x-diff"
    one = patches[("one", "vllm")]["resolves"]
    assert one == [
        {
            "type": "defect",
            "id": "vllm-project/vllm#100",
            "description": "resolved by fixpack fix one: Fix one",
            "references": ["https://github.com/vllm-project/vllm/issues/100"],
        }
    ]
    (alpha,) = patches[("alpha", "vllm-gaudi")]["resolves"]  # no bug: the fix itself, its PR as a reference
    assert (alpha["id"], alpha["name"], alpha["description"]) == (
        "alpha",
        "Fix alpha",
        "resolved by fixpack fix alpha: Fix alpha",
    )
    assert alpha["references"] == ["https://github.com/vllm-project/vllm-gaudi/pull/1731"]
    (two,) = patches[("two", "vllm-gaudi")]["resolves"]
    assert two["references"] == [
        "https://github.com/vllm-project/vllm-gaudi/commit/c8d890911774c6d88f70a6b5be253e091f93057f"
    ]
    for name in ("vllm", "vllm-gaudi"):  # the patched files, with the hashes they have on disk
        on_disk = {f["name"]: hashlib.sha256(applied.read(f["name"])).hexdigest() for f in found[name]["components"]}
        assert {f["name"]: f["hashes"] for f in found[name]["components"]} == {
            path: [{"alg": "SHA-256", "content": digest}] for path, digest in on_disk.items()
        }
        assert all(
            f["type"] == "file" and f["bom-ref"].startswith(f"fixpack/{name}/file/") for f in found[name]["components"]
        )
    assert sorted(f["name"] for f in gaudi["components"]) == [
        "vllm_gaudi/batch.py", "vllm_gaudi/new_module.py", "vllm_gaudi/runner.py",
    ]  # fmt: skip
    check = found["fixpack-runtime-check"]
    assert "purl" not in check and check["version"] == "1"
    assert {f["name"]: f["hashes"][0]["content"] for f in check["components"]} == {
        f["name"]: hashlib.sha256((applied.path / f["name"]).read_bytes()).hexdigest() for f in check["components"]
    }
    assert "fixpack_runtime_check/__init__.py" in {f["name"] for f in check["components"]}
    props = properties(vllm)
    assert props == properties(gaudi)
    assert props["fixpack:profile"] == props["fixpack:release"] == "v0.26.0"
    assert props["fixpack:opt-ins"] == "alpha, beta" and props["fixpack:fixes"] == "one, two, alpha, beta"
    assert props["fixpack:mode"] == "in-place"
    assert props["fixpack:vulnerabilities"].startswith("none: no fix of this set resolves a CVE")
    refs = [c["bom-ref"] for c in doc["components"]]
    refs += [a["bom-ref"] for c in doc["components"] for a in c.get("pedigree", {}).get("ancestors", [])]
    refs += [f["bom-ref"] for c in doc["components"] for f in c.get("components", [])]
    assert len(refs) == len(set(refs)) == 3 + 2 + 4 + len(check["components"])


def test_the_digest_is_status_s_and_each_diff_is_fixpack_diff_s(applied, cli):
    doc = json.loads(sbom(cli, applied.path))
    status = json.loads(cli("status", "--site", str(applied.path), "--json").stdout)
    found = components(doc)
    for name in ("vllm", "vllm-gaudi"):
        props = properties(found[name])
        assert props["fixpack:fix-set"] == status["fix_set"]["digest"]
        assert props["fixpack:fixes"].split(", ") == status["fix_set"]["fixes"]
        diffs = {fix_of(p): p["diff"]["text"]["content"] for p in found[name]["pedigree"]["patches"]}
        for fix_id, text in diffs.items():
            exported = cli("diff", fix_id, "--dist", name)
            assert exported.exit_code == 0, exported.output
            # fixpack diff FIX also exports what FIX requires, first (two requires one)
            assert exported.stdout == text if fix_id != "two" else exported.stdout.endswith(text)
        plan = cli("diff", "--profile", "v0.26.0", *OPT_INS, "--dist", name).stdout
        assert plan == "".join(diffs[f] for f in props["fixpack:fixes"].split(", ") if f in diffs)


def test_the_same_site_gives_the_same_bytes_twice_and_on_a_copy(applied, cli, tmp_path, monkeypatch):
    before = applied.snapshot()
    first = sbom(cli, applied.path)
    assert applied.snapshot() == before  # read, never written
    assert sbom(cli, applied.path) == first
    copy = tmp_path / "elsewhere" / "site"
    shutil.copytree(applied.path, copy, symlinks=True)
    assert sbom(cli, copy) == first
    serial = json.loads(first)["serialNumber"]
    assert re.fullmatch(r"urn:uuid:[0-9a-f]{8}-[0-9a-f]{4}-5[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}", serial)
    monkeypatch.setenv("SOURCE_DATE_EPOCH", "1767225600")
    stamped = sbom(cli, applied.path)
    doc = valid(stamped)
    assert doc["metadata"]["timestamp"] == "2026-01-01T00:00:00+00:00"
    assert doc["serialNumber"] != serial  # derived from the content, the time included
    assert sbom(cli, copy) == stamped


def test_written_to_a_file_it_is_what_stdout_would_have(applied, cli, tmp_path):
    out = tmp_path / "sbom.cdx.json"
    r = cli("sbom", "--site", str(applied.path), "-o", str(out))
    assert r.exit_code == 0 and r.stdout == "", r.output
    assert r.stderr == f"fixpack: sbom: CycloneDX 1.6, 5 patches, written to {out}\n"
    assert out.read_text() == sbom(cli, applied.path)
    assert sorted(p.name for p in tmp_path.iterdir() if "sbom" in p.name) == ["sbom.cdx.json"]


def test_an_overlay_is_recorded_with_its_hook_and_the_same_bytes_each_time(cookbook, site, cli, tmp_path):
    pack(cookbook)
    overlay = tmp_path / "overlay"
    apply(cli, site.path, "--overlay", str(overlay))
    text = sbom(cli, site.path, "--overlay", str(overlay))
    assert sbom(cli, site.path, "--overlay", str(overlay)) == text
    doc = valid(text)
    found = components(doc)
    status = json.loads(cli("status", "--site", str(site.path), "--overlay", str(overlay), "--json").stdout)
    props = properties(found["vllm-gaudi"])
    assert props["fixpack:mode"] == "overlay" and props["fixpack:fix-set"] == status["fix_set"]["digest"]
    patched = {f["name"]: f["hashes"][0]["content"] for f in found["vllm-gaudi"]["components"]}
    modules = overlay / ".fixpack" / "modules"
    assert patched == {p: hashlib.sha256((modules / p).read_bytes()).hexdigest() for p in patched}
    check = {f["name"] for f in found["fixpack-runtime-check"]["components"]}
    assert "sitecustomize.py" in check and "fixpack_runtime_check/__init__.py" in check
    assert sum(len(c.get("pedigree", {}).get("patches", [])) for c in doc["components"]) == 5
    moved = tmp_path / "moved"
    shutil.copytree(site.path, moved / "site", symlinks=True)
    shutil.copytree(overlay, moved / "overlay", symlinks=True)
    assert sbom(cli, moved / "site", "--overlay", str(moved / "overlay")) == text


def test_a_site_with_nothing_applied_or_a_changed_file_is_refused(cookbook, site, cli):
    pack(cookbook)
    line = refused(cli("sbom", "--site", str(site.path)), 1)
    assert "no fixes are applied" in line
    apply(cli, site.path)
    site.file("vllm_gaudi/batch.py").write_text("edited after the apply\n")
    line = refused(cli("sbom", "--site", str(site.path)), 1)
    assert "does not hold" in line and "vllm_gaudi/batch.py" in line


def test_a_cookbook_whose_patches_differ_from_those_applied_is_refused(applied, cookbook, cli):
    patch = cookbook.root / "fixes" / "alpha" / "v0.26.0.patch"
    patch.write_text(patch.read_text().replace("+# alpha", "+# alpha, edited since"))
    cookbook.lock()
    assert "not this cookbook's" in refused(cli("sbom", "--site", str(applied.path)), 1)


# -- --merge ---------------------------------------------------------------------------------------------


def environment_document(spec: str = "1.6", gaudi: bool = True) -> dict:
    """A document as ``cyclonedx-py environment`` writes one: other packages, vLLM with a purl that has
    a qualifier, vllm-gaudi (installed from a folder) without one, under its import name."""
    listed = [
        {
            "type": "library",
            "bom-ref": "numpy==2.1.0",
            "name": "numpy",
            "version": "2.1.0",
            "description": "Fundamental package for array computing in Python",
            "licenses": [{"license": {"id": "BSD-3-Clause"}}],
            "purl": "pkg:pypi/numpy@2.1.0",
            "externalReferences": [{"type": "website", "url": "https://numpy.org"}],
        },
        {
            "type": "library",
            "bom-ref": "vllm==0.26.0",
            "name": "vllm",
            "version": "0.26.0",
            "purl": "pkg:pypi/vllm@0.26.0?file_name=vllm-0.26.0-cp38-abi3-manylinux1_x86_64.whl",
        },
    ]
    if gaudi:
        listed.append(
            {
                "type": "library",
                "bom-ref": "vllm_gaudi==0.26.0",
                "name": "vllm_gaudi",
                "version": "0.26.0",
                "externalReferences": [{"type": "distribution", "url": "file:///workspace/vllm-gaudi"}],
            }
        )
    return {
        "$schema": f"http://cyclonedx.org/schema/bom-{spec}.schema.json",
        "bomFormat": "CycloneDX",
        "specVersion": spec,
        "serialNumber": "urn:uuid:3e671687-395b-41f5-a30f-a58921a69b79",
        "version": 1,
        "metadata": {
            "timestamp": "2026-12-01T10:00:00+00:00",
            "tools": {"components": [{"type": "application", "name": "cyclonedx-py", "version": "7.1.0"}]},
            "component": {"type": "application", "bom-ref": "root", "name": "serve-env", "version": "0"},
        },
        "components": listed,
        "dependencies": [{"ref": "root", "dependsOn": [c["bom-ref"] for c in listed]}]
        + [{"ref": c["bom-ref"]} for c in listed],
    }


@pytest.mark.parametrize("spec", ["1.6", "1.5", "1.7"])
def test_merge_adds_the_pedigree_and_leaves_the_rest_as_it_was(applied, cli, tmp_path, spec):
    schema = {"1.5": SchemaVersion.V1_5, "1.6": SchemaVersion.V1_6, "1.7": SchemaVersion.V1_7}[spec]
    given = environment_document(spec)
    valid(json.dumps(given), schema)
    source = tmp_path / "env.cdx.json"
    source.write_text(json.dumps(given, indent=1))
    before = source.read_bytes()
    r = cli("sbom", "--site", str(applied.path), "--merge", str(source))
    assert r.exit_code == 0, r.output
    assert source.read_bytes() == before  # the input is read, never written
    merged = valid(r.stdout, schema)
    own = components(json.loads(sbom(cli, applied.path)))
    assert merged["serialNumber"] == given["serialNumber"] and merged["version"] == 2
    assert {k: v for k, v in merged.items() if k not in ("components", "version")} == {
        k: v for k, v in given.items() if k not in ("components", "version")
    }
    by_ref = {c["bom-ref"]: c for c in merged["components"]}
    assert by_ref["numpy==2.1.0"] == given["components"][0]
    for ref, name in (("vllm==0.26.0", "vllm"), ("vllm_gaudi==0.26.0", "vllm-gaudi")):
        was = next(c for c in given["components"] if c["bom-ref"] == ref)
        now = by_ref[ref]
        assert {k: v for k, v in now.items() if k not in ("pedigree", "components", "properties")} == was
        assert now["pedigree"] == own[name]["pedigree"] and now["properties"] == own[name]["properties"]
        assert now["components"] == own[name]["components"]
    assert by_ref["fixpack/fixpack-runtime-check"] == own["fixpack-runtime-check"]  # the document had none
    assert list(by_ref) == ["numpy==2.1.0", "vllm==0.26.0", "vllm_gaudi==0.26.0", "fixpack/fixpack-runtime-check"]


def test_merge_refuses_a_document_without_a_pinned_distribution_naming_it(applied, cli, tmp_path):
    source = tmp_path / "env.cdx.json"
    source.write_text(json.dumps(environment_document(gaudi=False)))
    out = tmp_path / "out.json"
    line = refused(cli("sbom", "--site", str(applied.path), "--merge", str(source), "-o", str(out)), 1)
    assert "no component is vllm-gaudi 0.26.0" in line and "pkg:github/vllm-project/vllm-gaudi@v0.26.0" in line
    assert not out.exists()
    twice = tmp_path / "merged.json"
    source.write_text(json.dumps(environment_document()))
    assert cli("sbom", "--site", str(applied.path), "--merge", str(source), "-o", str(twice)).exit_code == 0
    again = refused(cli("sbom", "--site", str(applied.path), "--merge", str(twice)), 1)
    assert "component vllm 0.26.0 already has a pedigree" in again


@pytest.mark.parametrize(
    "content, said",
    [
        (None, "cannot read it"),
        (b"{not json", "not JSON"),
        (b"\xff\xfe", "not JSON"),
        (b'{"bomFormat": "SPDX"}', "not a CycloneDX document"),
        (json.dumps(environment_document("1.4")).encode(), "CycloneDX 1.4: fixpack merges into 1.5, 1.6, 1.7"),
        (json.dumps({**environment_document(), "version": "one"}).encode(), "not a valid CycloneDX 1.6 document"),
    ],
)
def test_bad_merge_input_is_a_usage_error_in_one_line_and_nothing_is_written(applied, cli, tmp_path, content, said):
    source = tmp_path / "given.json"
    if content is not None:
        source.write_bytes(content)
    out = tmp_path / "out" / "sbom.json"
    out.parent.mkdir()
    line = refused(cli("sbom", "--site", str(applied.path), "--merge", str(source), "-o", str(out)), 2)
    assert said in line and str(source) in line
    assert list(out.parent.iterdir()) == []


def test_an_output_is_never_written_through_a_link_nor_over_a_special_file(applied, cli, tmp_path):
    """Issue 56: a link planted where the old temporary name was, a link or a FIFO named as the
    output, and a device: the link's target, the FIFO and the device are as they were."""
    victim = tmp_path / "victim"
    victim.write_text("kept\n")
    out = tmp_path / "sbom.json"
    (tmp_path / ".sbom.json.fixpack-tmp").symlink_to(victim)
    assert cli("sbom", "--site", str(applied.path), "-o", str(out)).exit_code == 0
    assert victim.read_text() == "kept\n" and valid(out.read_text())
    assert stat.S_IMODE(out.stat().st_mode) == 0o644
    link, fifo = tmp_path / "link.json", tmp_path / "fifo.json"
    link.symlink_to(victim)
    os.mkfifo(fifo)
    targets = [(link, "is a symbolic link"), (fifo, "is not a regular file")]
    if os.geteuid() == 0:  # a character device like /dev/null, made here
        device = tmp_path / "null"
        os.mknod(device, stat.S_IFCHR | 0o666, os.makedev(1, 3))
        targets.append((device, "is not a regular file"))
    for target, said in targets:
        before = sorted((p.name, p.lstat().st_mode) for p in tmp_path.iterdir())
        line = refused(cli("sbom", "--site", str(applied.path), "-o", str(target)), 3)
        assert f"--output {target}: {said}" in line and "nothing was written" in line, line
        assert sorted((p.name, p.lstat().st_mode) for p in tmp_path.iterdir()) == before
    assert victim.read_text() == "kept\n" and link.readlink() == victim


def test_a_new_output_is_readable_by_others_whatever_the_umask(applied, cli, tmp_path):
    old = os.umask(0o077)
    try:
        assert cli("sbom", "--site", str(applied.path), "-o", str(tmp_path / "sbom.json")).exit_code == 0
    finally:
        os.umask(old)
    assert stat.S_IMODE((tmp_path / "sbom.json").stat().st_mode) == 0o644
    assert [p.name for p in tmp_path.iterdir() if p.name.endswith(".fixpack-tmp")] == []


def test_an_output_that_cannot_be_written_is_an_environment_error_and_nothing_is_left(applied, cli, tmp_path):
    plain = tmp_path / "plain-file"
    plain.write_text("kept\n")
    for target, said in (
        (tmp_path / "no-such-folder" / "sbom.json", "No such file or directory"),
        (plain / "sbom.json", "Not a directory"),
        (tmp_path, "is a directory"),
    ):
        before = sorted(p.name for p in tmp_path.rglob("*"))
        line = refused(cli("sbom", "--site", str(applied.path), "-o", str(target)), 3)
        assert f"--output {target}: " in line and said in line
        assert sorted(p.name for p in tmp_path.rglob("*")) == before
    assert plain.read_text() == "kept\n"


def test_a_bad_source_date_epoch_and_a_missing_site_are_one_line(applied, cli, tmp_path, monkeypatch):
    assert "no such directory" in refused(cli("sbom", "--site", str(tmp_path / "nowhere")), 3)
    for value in ("yesterday", "-1", "1_000", " 7 ", "+7", "\u0667"):  # the last: an Arabic-Indic 7
        monkeypatch.setenv("SOURCE_DATE_EPOCH", value)
        assert f"SOURCE_DATE_EPOCH {value!r}" in refused(cli("sbom", "--site", str(applied.path)), 2)


def _gaudi_as(purl: str | None, version: str = "0.26.0") -> dict:
    doc = environment_document()
    gaudi = next(c for c in doc["components"] if c["name"] == "vllm_gaudi")
    gaudi["version"] = version
    if purl is not None:
        gaudi["purl"] = purl
    return doc


@pytest.mark.parametrize(
    ("document", "code", "said"),
    [
        (_gaudi_as("pkg:npm/vllm-gaudi@0.26.0"), 1, "has purl 'pkg:npm/vllm-gaudi@0.26.0', another package"),
        (_gaudi_as("pkg:pypi/vllm-gaudi@0.25.0"), 1, "has purl 'pkg:pypi/vllm-gaudi@0.25.0', another package"),
        (_gaudi_as("pkg:github/vllm-project/vllm-gaudi@v0.26.0", "0.25.0"), 1, "says version '0.25.0'"),
        (environment_document(), 1, "bom-ref"),
    ],
    ids=["another type", "another version", "a version against its purl", "a bom-ref fixpack adds"],
)
def test_merge_refuses_a_component_that_is_not_this_environments(applied, cli, tmp_path, document, code, said):
    source, out = tmp_path / "env.cdx.json", tmp_path / "out.json"
    if said == "bom-ref":  # the input already uses a bom-ref of the pedigree's
        document["components"].append({"type": "library", "bom-ref": "fixpack/vllm", "name": "other"})
        said = "it already uses bom-ref 'fixpack/vllm'"
    source.write_text(json.dumps(document))
    assert said in refused(cli("sbom", "--site", str(applied.path), "--merge", str(source), "-o", str(out)), code)
    assert not out.exists()


@pytest.mark.parametrize(
    ("make", "said"),
    [
        (lambda p: p.write_text('{"bomFormat": "CycloneDX", "bomFormat": "SPDX"}'), "appears twice in one object"),
        (lambda p: p.write_text("[" * 100_000), "nested too deep"),
        (lambda p: os.mkfifo(p), "is not a regular file"),
        (lambda p: p.write_text(json.dumps(_nested(200))), "nested more than 64 levels deep"),
    ],
    ids=["duplicate keys", "100k deep", "a FIFO", "components 200 deep"],
)
def test_merge_input_that_cannot_be_taken_is_one_line(applied, cli, tmp_path, make, said):
    source = tmp_path / "env.cdx.json"
    make(source)
    assert said in refused(cli("sbom", "--site", str(applied.path), "--merge", str(source)), 2)


def test_merge_of_a_device_is_refused_without_reading_it(applied, cli):
    assert "/dev/zero is not a regular file" in refused(
        cli("sbom", "--site", str(applied.path), "--merge", "/dev/zero"), 2
    )


def _nested(depth: int) -> dict:
    doc = environment_document()
    inner: dict = {"type": "library", "bom-ref": "leaf", "name": "leaf"}
    for i in range(depth):
        inner = {"type": "library", "bom-ref": f"n{i}", "name": f"n{i}", "components": [inner]}
    doc["components"].append(inner)
    return doc


def test_help_says_what_the_document_holds(cli):
    r = cli("sbom", "--help")
    assert r.exit_code == 0
    for said in ("CycloneDX 1.6", "--merge FILE", "-o, --output FILE", "SOURCE_DATE_EPOCH", "No fix resolves a CVE"):
        assert said in " ".join(r.stdout.split()), said
    assert "sbom" in cli("--help").stdout


# -- the rule, alone --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "fields, expected",
    [
        ({}, UNOFFICIAL),
        ({"forwarded": "vllm-project/vllm#5"}, UNOFFICIAL),  # sent upstream, but not taken from there
        ({"origin": "vllm-project/vllm-gaudi@c8d89091177"}, BACKPORT),
        ({"origin": "https://github.com/vllm-project/vllm/commit/0123456789abcdef"}, BACKPORT),
        ({"origin": "c8d89091177"}, BACKPORT),
        ({"origin": "vllm-project/vllm#54218"}, CHERRY_PICK),  # fix.toml does not say the PR merged
        ({"origin": "https://github.com/vllm-project/vllm/pull/54218"}, CHERRY_PICK),
        ({"origin": "vllm-project/vllm#54218", "applied_upstream": "vllm-project/vllm@0123456789"}, BACKPORT),
        ({"origin": "vllm-project/vllm-gaudi@1e9ce8b6", "regressed_in": "v0.24.0rc0"}, CHERRY_PICK),
    ],
)
def test_the_patch_type_rule(fields, expected):
    assert patch_type(Upstream(status="pending", **fields)) == expected


def test_references_become_urls():
    repo = "vllm-project/vllm-gaudi"
    assert url("vllm-project/vllm#7", repo) == "https://github.com/vllm-project/vllm/issues/7"
    assert url("vllm-project/vllm#7", repo, "pull") == "https://github.com/vllm-project/vllm/pull/7"
    assert url("abc1234", repo) == "https://github.com/vllm-project/vllm-gaudi/commit/abc1234"
    assert url("https://example.org/x", repo) == "https://example.org/x"
    assert url("no", repo) is None and url("not-needed", repo) is None


def test_a_fix_with_several_bugs_resolves_each_with_the_pull_requests_it_names():
    bugs = ("vllm-project/vllm#1", "https://bugs.example.org/2")
    up = Upstream(status="submitted", forwarded="vllm-project/vllm#9", bug=bugs, origin="abc1234")
    fix = Fix(
        id="f",
        title="Fix f",
        why="why",
        requires=(),
        conflicts=(),
        opt_in=False,
        upstream=up,
        proof=Proof(level="none"),
        verified_on="",
    )
    found = issues(fix, "vllm-project/vllm")
    assert [(i.id, i.name, i.description) for i in found] == [
        (b, None, "resolved by fixpack fix f: Fix f") for b in bugs
    ]
    named = ("https://github.com/vllm-project/vllm/commit/abc1234", "https://github.com/vllm-project/vllm/issues/9")
    assert found[0].references == ("https://github.com/vllm-project/vllm/issues/1", *named)
    assert found[1].references == ("https://bugs.example.org/2", *named)


# -- what never loads the library ---------------------------------------------------------------------------


def _imported(stderr: str) -> set[str]:
    """The top-level packages a ``-X importtime`` run imported."""
    rows = (ln.rpartition("|")[2].strip() for ln in stderr.splitlines() if ln.startswith("import time:"))
    return {name.split(".")[0] for name in rows}


LIBRARY = {"cyclonedx", "packageurl", "py_serializable", "license_expression"}  # the library and its own dependencies


def test_apply_the_warm_path_and_the_runtime_check_import_nothing_of_cyclonedx(cookbook, site):
    pack(cookbook)
    cold = apply_all(cookbook, site, *OPT_INS)
    assert cold.returncode == 0 and not took_fast_path(cold), cold.stderr
    assert "fixpack" in _imported(cold.stderr) and not _imported(cold.stderr) & LIBRARY
    warm = apply_all(cookbook, site, *OPT_INS)
    assert warm.returncode == 0 and took_fast_path(warm), warm.stderr
    assert not _imported(warm.stderr) & LIBRARY
    check = py(LOAD, site.path, flags=("-X", "importtime"))
    assert check.returncode == 0 and "plugins ['fixpack_runtime_check']" in check.stdout, check.stderr
    assert "fixpack_runtime_check" in _imported(check.stderr) and not _imported(check.stderr) & LIBRARY
    # the way of looking sees the library where it is loaded: in the sbom command
    traced = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "fixpack", "sbom", "--site", str(site.path)],
        capture_output=True,
        text=True,
        cwd=REPO,
        env={**os.environ, "FIXPACK_COOKBOOK": str(cookbook.root)},
    )
    assert traced.returncode == 0 and {"cyclonedx", "packageurl"} <= _imported(traced.stderr), traced.stderr[-2000:]


def test_without_the_library_the_command_says_how_to_install_it(applied, cookbook):
    blocked = (
        "import sys; sys.modules['cyclonedx'] = None; from fixpack.cli import main; sys.argv[0] = 'fixpack'; main()"
    )
    r = subprocess.run(
        [sys.executable, "-c", blocked, "sbom", "--site", str(applied.path)],
        capture_output=True,
        text=True,
        cwd=REPO,
        env={**os.environ, "FIXPACK_COOKBOOK": str(cookbook.root)},
    )
    assert r.returncode == 3 and r.stdout == "", r.stderr
    # fixpack is not on a package index: the line installs the extra from this checkout (issue 57)
    assert r.stderr.splitlines() == [
        "fixpack: error: fixpack sbom needs cyclonedx-python-lib (cyclonedx is missing): "
        f"{Path(sys.executable).name} -m pip install -e '{REPO}[sbom]' (cyclonedx-python-lib[json-validation] 11)"
    ]


# -- the real pack ------------------------------------------------------------------------------------------


@pytest.mark.realtree
@pytest.mark.skipif(
    not (os.environ.get("FIXPACK_SRC_VLLM_GAUDI") and os.environ.get("FIXPACK_SRC_VLLM")),
    reason="FIXPACK_SRC_VLLM_GAUDI and FIXPACK_SRC_VLLM are not set (real trees)",
)
def test_the_real_pack_with_both_opt_ins(tmp_path, cli, monkeypatch):
    from builders import GAUDI_COMMIT, write_dist
    from realtree import PROFILE, opt_ins_of, package_files

    from fixpack.cookbook.catalog import Catalog
    from fixpack.core.plan import resolve

    monkeypatch.delenv("FIXPACK_COOKBOOK", raising=False)
    site = tmp_path / "site"
    gaudi = package_files(Path(os.environ["FIXPACK_SRC_VLLM_GAUDI"]), "vllm_gaudi")
    gaudi.pop("vllm_gaudi/_version.py", None)
    write_dist(site, "vllm-gaudi", "0.26.0", gaudi, commit=GAUDI_COMMIT)
    write_dist(site, "vllm", "0.26.0", package_files(Path(os.environ["FIXPACK_SRC_VLLM"]), "vllm"))
    opt_ins = opt_ins_of()
    assert cli("apply", "--profile", PROFILE, "--site", str(site), *opt_ins).exit_code == 0
    text = sbom(cli, site)
    assert sbom(cli, site) == text
    doc = valid(text)
    found = components(doc)
    catalog = Catalog.load(REPO)
    profile = catalog.profile(PROFILE)
    plan = resolve(catalog.fixes, profile, tuple(opt_ins))
    status = json.loads(cli("status", "--site", str(site), "--json").stdout)["fix_set"]
    patches = {(fix_of(p), name): p for name in ("vllm", "vllm-gaudi") for p in found[name]["pedigree"]["patches"]}
    # every fix of the pack is applied (both opt-ins named) but the one a pack fix supersedes
    assert set(plan.fix_ids) == set(profile.pack) - set(plan.superseded) and set(plan.superseded)
    assert {fid for fid, _ in patches} == set(plan.fix_ids)
    assert len(patches) == len({(pc.change.fix_id, pc.dist) for pc in plan.changes})
    for name in ("vllm", "vllm-gaudi"):
        props = properties(found[name])
        assert props["fixpack:fix-set"] == status["digest"] and props["fixpack:fixes"].split(", ") == status["fixes"]
        exported = cli("diff", "--profile", PROFILE, *opt_ins, "--dist", name).stdout
        mine = {fid: p["diff"]["text"]["content"] for (fid, dist), p in patches.items() if dist == name}
        assert exported == "".join(mine[f] for f in plan.fix_ids if f in mine)
        for fid, diff in mine.items():
            if not catalog.fixes[fid].requires:
                assert cli("diff", fid, "--dist", name).stdout == diff, fid
    types = {fid: p["type"] for (fid, _), p in patches.items()}
    assert types["hybrid-prefill-batch"] == "backport"  # a commit on vllm-gaudi's main
    assert types["structured-output-rows"] == types["fp8-moe-gather"] == "cherry-pick"
    assert types["sampling-rows-refresh"] == "unofficial"
    gaudi_files = {f["name"] for f in found["vllm-gaudi"]["components"]}
    vllm_files = {f["name"] for f in found["vllm"]["components"]}
    assert len(gaudi_files | vllm_files) == len(plan.paths())
