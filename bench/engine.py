"""The engine under test: a snapshot of a checkout's fixpack, the command lines run on it (the
contenders, their floors and peers), and the bench's own fixpack and builders for reading catalogs
and writing cookbooks."""

from __future__ import annotations

import compileall
import json
import os
import shlex
import shutil
import sys
from pathlib import Path
from types import ModuleType

from .measure import must, run

__all__ = ["Tools", "snapshot", "load_builders", "PROFILE"]

PROFILE = "v0.26.0"

# Besides fixpack/ and fixes/apply_all.py, what an engine's entry point may read at its root
# (older ones check requirements.txt); copied when the checkout has it.
ROOT_FILES = ("requirements.txt", "pyproject.toml")


def snapshot(repo: Path, dest: Path) -> Path:
    """A copy of ``repo``'s engine in ``dest``, so that edits made to the checkout while the bench
    runs do not mix in."""
    shutil.copytree(repo / "fixpack", dest / "fixpack", ignore=shutil.ignore_patterns("__pycache__"))
    (dest / "fixes").mkdir()
    shutil.copy2(repo / "fixes" / "apply_all.py", dest / "fixes" / "apply_all.py")
    for name in ROOT_FILES:
        if (repo / name).is_file():
            shutil.copy2(repo / name, dest / name)
    # As the README has an image do when it is built: a start does not compile fixpack itself
    # (images often set PYTHONDONTWRITEBYTECODE, so nothing would keep the bytecode).
    compileall.compile_dir(dest / "fixpack", quiet=1)
    return dest


def load_builders(own: Path, repo: Path) -> ModuleType:
    """The tests' builders (``repo/tests/builders.py``), bound to the bench's own fixpack snapshot
    ``own``, which the bench also reads catalogs with (the engine under test only runs in processes
    of its own, so an older engine needs nothing of this checkout's internals).

    ``fixpack`` is imported from the snapshot first: builders puts the checkout on sys.path, but an
    imported package keeps its own ``__path__``, so every fixpack module then comes from the snapshot.
    """
    sys.path.insert(0, str(own))
    import fixpack  # noqa: F401

    sys.path.insert(1, str(repo / "tests"))
    import builders

    return builders


# The floors: each one plain process, sequential, nothing an apply could leave out. The hash floor
# reads and hashes the targets (what any apply or re-run must do to know where it stands); the
# compile floor also compiles the Python ones and writes their checked hash-based .pyc (PEP 552),
# as fixpack's apply does, in place (no temporary file, no fsync).
HASH_FLOOR = """\
import hashlib, sys
for p in sys.argv[1:]:
    with open(p, "rb") as f:
        hashlib.sha256(f.read()).hexdigest()
"""

COMPILE_FLOOR = """\
import hashlib, importlib.util, marshal, os, sys
write = sys.argv[1] == "1"
flags = (0b11).to_bytes(4, "little")  # PEP 552: hash-based, checked
for p in sys.argv[2:]:
    with open(p, "rb") as f:
        source = f.read()
    hashlib.sha256(source).hexdigest()
    if not p.endswith(".py"):
        continue
    code = compile(source, p, "exec", dont_inherit=True)
    if write:
        pyc = importlib.util.cache_from_source(p)
        os.makedirs(os.path.dirname(pyc), exist_ok=True)
        with open(pyc, "wb") as f:
            f.write(importlib.util.MAGIC_NUMBER + flags + importlib.util.source_hash(source) + marshal.dumps(code))
"""


# The peer's compile step: checked hash-based bytecode, as the apply writes it (-f: even where a
# .pyc looks current).
COMPILEALL = ("-m", "compileall", "-q", "-f", "--invalidation-mode", "checked-hash")


class Tools:
    """The command lines of the contenders, with the environment each one runs in."""

    def __init__(self, python: str, engine: Path, repo: Path, write_bytecode: bool = True) -> None:
        self.python = python
        self.repo = engine  # where fixpack/ and fixes/apply_all.py are run from (a snapshot)
        self.source = repo  # the bench's checkout: its fixes/ and profiles/ are the cookbook copied
        self.base_env = {k: v for k, v in os.environ.items() if not k.startswith("FIXPACK_")}
        for name in ("PYTHONPATH", "PYTHONDONTWRITEBYTECODE", "PYTHONPYCACHEPREFIX"):
            self.base_env.pop(name, None)
        # Whether an apply writes the patched modules' bytecode is the run's setting, not the
        # caller's shell's: it changes what the apply and every first import cost.
        self.write_bytecode = write_bytecode
        if not write_bytecode:
            self.base_env["PYTHONDONTWRITEBYTECODE"] = "1"

    def env(self, cookbook: Path, module: bool = False) -> dict[str, str]:
        env = dict(self.base_env, FIXPACK_COOKBOOK=str(cookbook))
        if module:
            env["PYTHONPATH"] = str(self.repo)
        return env

    def apply_all(self, site: Path, opt_ins: list[str]) -> list[str]:
        script = str(self.repo / "fixes" / "apply_all.py")
        return [self.python, script, "--profile", PROFILE, *opt_ins, "--site", str(site)]

    def apply_recipe(self, site: Path, slug: str) -> list[str]:
        script = str(self.repo / "fixes" / "apply_all.py")
        return [self.python, script, "--recipe", slug, "--site", str(site)]

    def knows_recipes(self) -> bool:
        """Whether the engine under test takes ``apply --recipe`` (engines before issue 29 do not)."""
        commands = self.repo / "fixpack" / "commands"
        return any((commands / where).is_file() for where in ("launch.py", "recipes/launch.py"))

    def fixpack(self, *args: str) -> list[str]:
        return [self.python, "-m", "fixpack", *args]

    def listed(self, cookbook: Path) -> list[str]:
        r = must(run(self.fixpack("list", "--profile", PROFILE, "--json"), env=self.env(cookbook, True)), "list")
        return [f["id"] for f in json.loads(r.out)["fixes"]]

    def floor(self, files: list[Path]) -> list[str]:
        """The hash floor: python reading and hashing the files, the least any apply or re-run must do."""
        return [self.python, "-c", HASH_FLOOR, *map(str, files)]

    def compile_floor(self, files: list[Path]) -> list[str]:
        """The compile floor: the hash floor, then the Python files compiled and their hash-based
        .pyc written (only compiled under --dont-write-bytecode, as the apply then does): the least
        an apply that checks and caches what it writes can take."""
        return [self.python, "-c", COMPILE_FLOOR, "1" if self.write_bytecode else "0", *map(str, files)]

    def peer(self, patches: list[Path], modules: list[str]) -> list[str]:
        """What a cookbook without fixpack runs: ``patch -p1`` of each fix's patch in plan order,
        then ``compileall`` of the changed modules, hash-based .pyc as the apply writes them (run
        in the site, so that the paths given, and the bytecode's file names, are relative)."""
        script = (
            'for p in "$@"; do patch -p1 -s -N -i "$p" || exit 1; done\n'
            f"exec {shlex.join([self.python, *COMPILEALL, *modules])}\n"
        )
        return ["sh", "-c", script, "peer", *map(str, patches)]
