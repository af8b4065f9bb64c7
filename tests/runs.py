"""Running what the tests check in fresh processes: ``fixpack`` and ``fixes/apply_all.py`` on a
test site, vLLM's plugin loading in a fresh interpreter, and reading their errors."""

from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

from builders import REPO, Cookbook, Site, run_cli

SCRIPT = REPO / "fixes" / "apply_all.py"
APPLY = ("apply", "--profile", "v0.26.0")

# As vllm.plugins.load_plugins_by_group: entry points of the group, each loaded, then each called;
# vLLM's own logger ("vllm", INFO, a handler, no propagation) prints the line.
LOAD = """
import logging, sys, time
from importlib.metadata import entry_points
log = logging.getLogger("vllm")
log.setLevel(logging.INFO)
handler = logging.StreamHandler(sys.stdout)
handler.setFormatter(logging.Formatter("%(levelname)s %(name)s %(message)s"))
log.addHandler(handler)
log.propagate = False
plugins = {p.name: p.load() for p in entry_points(group="vllm.general_plugins")}
print("plugins", sorted(plugins))
for func in plugins.values():
    func()
print("vllm imported:", "vllm" in sys.modules)
"""


def env_of(cookbook: Cookbook) -> dict[str, str]:
    return {"FIXPACK_COOKBOOK": str(cookbook.root)}


# what an error line says to do next (issue 57): a command, an option, a page, or what to change
NEXT_STEP = re.compile(
    r"(reinstall|remove |give |point |unset|see |write it again|chown|fixpack \w+|pip install|--[a-z][a-z-]+|docs/)"
)


def one_line_error(stderr: str) -> str:
    """The error line; fails the test on a traceback or on more than one line."""
    assert "Traceback" not in stderr, stderr
    lines = [ln for ln in stderr.splitlines() if ln.startswith("fixpack: error:")]
    assert len(lines) == 1, stderr
    return lines[0]


def interrupted(cookbook: Cookbook, site: Site) -> dict:
    """Leave ``site`` with an apply's journal, both targets replaced (two fixes). A first run dies
    after its first durable write, the journal, which says how many writes come before the first
    rename: the backups, then every new content staged. The second run recovers that one (writing
    nothing: no target had changed) and dies right after renaming the two targets."""
    journal = site.path / ".fixpack" / "journal" / "journal.json"
    env = env_of(cookbook)
    r = run_cli(*APPLY, "--site", str(site.path), env={**env, "FIXPACK_CRASH_AFTER": "1"})
    assert r.returncode == 99, r.stderr
    entries = json.loads(journal.read_text())["entries"]
    before = 1 + sum(e["backup"] is not None for e in entries) + sum(e["new"] is not None for e in entries)
    r = run_cli(*APPLY, "--site", str(site.path), env={**env, "FIXPACK_CRASH_AFTER": str(before + 2)})
    assert r.returncode == 99, r.stderr
    entries = json.loads(journal.read_text())["entries"]
    replaced = [e["path"] for e in entries if e["root"] != "state" and e["new"] == sha256_of(site.file(e["path"]))]
    assert sorted(replaced) == ["vllm/sampler.py", "vllm_gaudi/runner.py"], replaced
    return json.loads(journal.read_text())


def sha256_of(path: Path) -> str | None:
    return hashlib.sha256(path.read_bytes()).hexdigest() if path.is_file() else None


def apply_all(cookbook: Cookbook, site: Site, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    """``apply_all.py --profile v0.26.0 ARGS`` as a container starts it, with ``-X importtime``
    for ``took_fast_path``."""
    full = dict(os.environ, FIXPACK_COOKBOOK=str(cookbook.root), **env)
    full.pop("PYTHONPATH", None)
    cmd = [sys.executable, "-X", "importtime", str(SCRIPT), "--profile", "v0.26.0", *args, "--site", str(site.path)]
    return subprocess.run(cmd, capture_output=True, text=True, env=full)


def took_fast_path(r: subprocess.CompletedProcess[str]) -> bool:
    return "fixpack.commands.install.apply" not in r.stderr  # -X importtime: only the full apply imports the recipe


def apply_overlay(
    book: Cookbook, site: Site, overlay: Path, *args: str, **env: str
) -> subprocess.CompletedProcess[str]:
    """``fixpack apply --profile v0.26.0 --overlay OVERLAY ARGS`` on ``site``."""
    return run_cli(
        "apply", "--profile", "v0.26.0", "--site", str(site.path), "--overlay", str(overlay), *args,
        env={"FIXPACK_COOKBOOK": str(book.root), **env},
    )  # fmt: skip


def py(code: str, *path: Path, flags: tuple[str, ...] = (), **env: str) -> subprocess.CompletedProcess[str]:
    """Run ``code`` in a fresh interpreter with ``path`` as PYTHONPATH."""
    full = {k: v for k, v in os.environ.items() if not k.startswith("FIXPACK_")}
    full.update(PYTHONPATH=os.pathsep.join(map(str, path)), **env)
    return subprocess.run(
        [sys.executable, *flags, "-c", textwrap.dedent(code)], capture_output=True, text=True, env=full, timeout=60
    )


def shown_as_printed(shown: list[str], printed: list[str]) -> bool:
    """A documented run's output ``shown`` is what was ``printed``, each "..." line (indented or not)
    standing for any lines (none included)."""
    if not shown:
        return not printed
    if shown[0].strip() == "...":
        return any(shown_as_printed(shown[1:], printed[i:]) for i in range(len(printed) + 1))
    return bool(printed) and printed[0] == shown[0] and shown_as_printed(shown[1:], printed[1:])
