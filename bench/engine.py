"""The engine under test: a snapshot of the checkout's fixpack, the commands run on it, and the
same snapshot imported into the bench for reading catalogs and writing cookbooks."""

from __future__ import annotations

import compileall
import json
import os
import shutil
import sys
from pathlib import Path
from types import ModuleType

from .measure import must, run

__all__ = ["Tools", "snapshot", "load_builders", "PROFILE"]

PROFILE = "v0.26.0"


def snapshot(repo: Path, work: Path) -> Path:
    """A copy of ``repo``'s engine, so that edits made to the checkout while the bench runs do not mix in."""
    engine = work / "engine"
    shutil.copytree(repo / "fixpack", engine / "fixpack", ignore=shutil.ignore_patterns("__pycache__"))
    (engine / "fixes").mkdir()
    shutil.copy2(repo / "fixes" / "apply_all.py", engine / "fixes" / "apply_all.py")
    shutil.copy2(repo / "requirements.txt", engine / "requirements.txt")  # apply_all.py checks it
    # As the README has an image do when it is built: a start does not compile fixpack itself
    # (images often set PYTHONDONTWRITEBYTECODE, so nothing would keep the bytecode).
    compileall.compile_dir(engine / "fixpack", quiet=1)
    return engine


def load_builders(engine: Path, repo: Path) -> ModuleType:
    """The tests' builders (``tests/builders.py``), bound to the snapshot's fixpack.

    ``fixpack`` is imported from the snapshot first: builders puts the checkout on sys.path, but an
    imported package keeps its own ``__path__``, so every fixpack module then comes from the snapshot.
    """
    sys.path.insert(0, str(engine))
    import fixpack  # noqa: F401

    sys.path.insert(1, str(repo / "tests"))
    import builders

    return builders


class Tools:
    """The command lines of the contenders, with the environment each one runs in."""

    def __init__(self, python: str, engine: Path, repo: Path, write_bytecode: bool = True) -> None:
        self.python = python
        self.repo = engine  # where fixpack/ and fixes/apply_all.py are run from (a snapshot)
        self.source = repo  # the checkout: its fixes/ and profiles/ are the cookbook copied
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

    def fixpack(self, *args: str) -> list[str]:
        return [self.python, "-m", "fixpack", *args]

    def listed(self, cookbook: Path) -> list[str]:
        r = must(run(self.fixpack("list", "--profile", PROFILE, "--json"), env=self.env(cookbook, True)), "list")
        return [f["id"] for f in json.loads(r.out)["fixes"]]

    def compile_floor(self, files: list[Path]) -> list[str]:
        """The floor and the compile check of the Python files among them, the largest in a forked
        child as fixpack does it: the least an apply that compiles what it writes can take."""
        code = (
            "import hashlib,os,sys\n"
            "src={p: open(p,'rb').read() for p in sys.argv[1:]}\n"
            "for b in src.values(): hashlib.sha256(b).hexdigest()\n"
            "py=sorted((p for p in src if p.endswith('.py')), key=lambda p: len(src[p]), reverse=True)\n"
            "pid=os.fork() if py else -1\n"
            "if pid==0:\n"
            "    compile(src[py[0]],py[0],'exec',dont_inherit=True); os._exit(0)\n"
            "for p in py[1:]: compile(src[p],p,'exec',dont_inherit=True)\n"
            "if pid>0: os.waitpid(pid,0)\n"
        )
        return [self.python, "-c", code, *map(str, files)]

    def floor(self, files: list[Path]) -> list[str]:
        """Python reading and hashing the same files: the least any apply or re-run must do."""
        code = (
            "import hashlib,sys\n"
            "for p in sys.argv[1:]:\n"
            "    with open(p,'rb') as f: hashlib.sha256(f.read()).hexdigest()\n"
        )
        return [self.python, "-c", code, *map(str, files)]
