"""``fixpack diff --check-style``: does each exported patch, applied to its tree, pass upstream's own
style checks on the files it touches?

The checks are those of the tree's ``.pre-commit-config.yaml`` that judge Python files: yapf
(``google/yapf``) and ruff (``astral-sh/ruff-pre-commit``), at the versions it pins, with the
tree's own configuration (``pyproject.toml``, ``setup.cfg``, ``.style.yapf``, ``ruff.toml``), each
hook's ``files``/``exclude`` and the top-level ``exclude``. They run in check mode (no
``--in-place``, no ``--fix``) as pre-commit runs them: from the tree's root, on paths relative to
it, ruff with ``--force-exclude``.

A fix is judged on what it brings: each of its files is checked before it (the pristine file with
the fixes before it in the plan) and after it, and the fix fails when a tool says more of the file
after it than before (compared by what is said, not where, since lines move: a line yapf would
rewrite, a ruff code and message). What the file already had is not the fix's.

The pinned tools come from the package index into a virtual environment of their own, made once
under the user's cache (``$FIXPACK_TOOLS``, else ``$XDG_CACHE_HOME/fixpack/tools``, else
``~/.cache/fixpack/tools``), never into this Python's site.
"""

from __future__ import annotations

import difflib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from ....cookbook.catalog import Catalog
from ....core import patch, rebuild
from ....core.plan import resolve, restrict
from ....errors import EnvironmentProblem, Refused, UsageError
from ....models import Plan, Profile
from ....runtime.agree import spans

__all__ = ["Hook", "FileStyle", "FixStyle", "StyleReport", "hooks", "tools_venv", "check_style"]

# The pre-commit repositories whose hooks check Python source, by the hook ids that do (ruff-pre-commit
# renamed its lint hook `ruff-check` in 0.12, keeping `ruff` as an alias; vLLM names the new one)
TOOLS = {"yapf": ("google/yapf", ("yapf",)), "ruff": ("astral-sh/ruff-pre-commit", ("ruff", "ruff-check"))}
CONFIGS = ("pyproject.toml", "setup.cfg", ".style.yapf", ".yapfignore", "ruff.toml", ".ruff.toml")


@dataclass(frozen=True, slots=True)
class Hook:
    tool: str  # yapf or ruff
    version: str  # as pip names it: 0.43.0
    files: str = ""  # pre-commit's include regex ('' = every file)
    exclude: str = ""

    def covers(self, path: str, top_exclude: str) -> bool:
        if not path.endswith(".py"):
            return False
        if top_exclude and re.search(top_exclude, path):
            return False
        if self.exclude and re.search(self.exclude, path):
            return False
        return not self.files or bool(re.search(self.files, path))


def hooks(tree: Path) -> tuple[list[Hook], str]:
    """The yapf and ruff hooks of ``tree``'s ``.pre-commit-config.yaml``, and its top-level exclude."""
    config = tree / ".pre-commit-config.yaml"
    if not config.is_file():
        raise UsageError(f"{tree} has no .pre-commit-config.yaml: --check-style runs the checks upstream declares")
    try:
        data = yaml.safe_load(config.read_text(encoding="utf-8")) or {}
    except yaml.YAMLError as exc:
        raise UsageError(f"{config}: not valid YAML: {str(exc).splitlines()[0]}") from None
    except (RecursionError, MemoryError):
        raise UsageError(f"{config}: nested too deep or too large to read") from None
    found = []
    for repo in data.get("repos") or []:
        url = str(repo.get("repo", ""))
        for tool, (name, hook_ids) in TOOLS.items():
            if not url.rstrip("/").endswith(name):
                continue
            for hook in repo.get("hooks") or []:
                if hook.get("id") in hook_ids:
                    version = str(repo.get("rev", "")).lstrip("v")
                    found.append(Hook(tool, version, str(hook.get("files", "")), str(hook.get("exclude", ""))))
    if not found:
        raise UsageError(f"{config} declares no yapf or ruff hook")
    return found, str(data.get("exclude", "") or "")


def _cache_root() -> Path:
    if os.environ.get("FIXPACK_TOOLS"):
        return Path(os.environ["FIXPACK_TOOLS"])
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "fixpack" / "tools"


def tools_venv(pins: dict[str, str]) -> Path:
    """The python of a virtual environment with exactly these tools (name -> version), made from the
    package index on first use (in a temporary folder beside it, renamed into place when complete)."""
    name = "-".join(f"{tool}-{version}" for tool, version in sorted(pins.items()))
    name += f"-py{sys.version_info.major}{sys.version_info.minor}"
    root = _cache_root()
    venv = root / name
    python = venv / "bin" / "python"
    if python.exists():
        return python
    try:
        root.mkdir(parents=True, exist_ok=True)
        work = Path(tempfile.mkdtemp(prefix=f".{name}.", dir=root))
    except OSError as exc:
        raise EnvironmentProblem(f"cannot make the style tools' cache under {root}: {exc.strerror}") from None
    try:
        made = subprocess.run([sys.executable, "-m", "venv", str(work)], capture_output=True, text=True, check=False)
        if made.returncode != 0:
            raise EnvironmentProblem(f"python -m venv failed: {(made.stderr or made.stdout).strip().splitlines()[-1:]}")
        wanted = [f"{tool}=={version}" for tool, version in sorted(pins.items())]
        pip = subprocess.run(
            [str(work / "bin" / "python"), "-m", "pip", "install", "--disable-pip-version-check", "-q", *wanted],
            capture_output=True,
            text=True,
            check=False,
        )
        if pip.returncode != 0:
            last = (pip.stderr or pip.stdout).strip().splitlines()
            raise EnvironmentProblem(
                f"cannot install {' '.join(wanted)} from the package index into {venv}: "
                f"{last[-1] if last else f'pip exited {pip.returncode}'}"
            )
        try:
            work.rename(venv)
        except OSError:  # another run made it meanwhile
            if not python.exists():
                raise
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return python


@dataclass
class FileStyle:
    path: str
    checks: dict[str, str] = field(default_factory=dict)  # tool -> passes | fails | not-run (the hook leaves it out)
    problems: list[str] = field(default_factory=list)  # the fix's own, as the tools say them

    @property
    def ok(self) -> bool:
        return "fails" not in self.checks.values()

    def to_json(self) -> dict[str, object]:
        return {"path": self.path, "checks": self.checks, "problems": self.problems}


@dataclass
class FixStyle:
    fix: str
    dist: str
    files: list[FileStyle] = field(default_factory=list)
    note: str = ""  # why it was not checked

    @property
    def ok(self) -> bool:
        """Checked, and passes (a patch left unchecked is not said to pass)."""
        return not self.note and all(f.ok for f in self.files)

    @property
    def failed(self) -> bool:
        return any(not f.ok for f in self.files)

    def to_json(self) -> dict[str, object]:
        return {
            "id": self.fix,
            "dist": self.dist,
            "ok": self.ok,
            "files": [f.to_json() for f in self.files],
            "note": self.note,
        }


@dataclass
class StyleReport:
    profile: str
    tools: dict[str, str]  # tool -> version, as the trees pin them
    fixes: list[FixStyle]

    @property
    def ok(self) -> bool:
        """No patch fails (those left unchecked are listed with the reason)."""
        return not any(f.failed for f in self.fixes)

    def to_json(self) -> dict[str, object]:
        return {"ok": self.ok, "profile": self.profile, "tools": self.tools, "fixes": [f.to_json() for f in self.fixes]}


def _added(before: bytes | None, after: bytes | None) -> set[int]:
    """The lines (1-based, of ``after``) that the change adds or rewrites."""
    old = (before or b"").decode(patch.ENC, patch.ERRORS).splitlines()
    new = (after or b"").decode(patch.ENC, patch.ERRORS).splitlines()
    out: set[int] = set()
    for tag, _, _, j1, j2 in difflib.SequenceMatcher(None, old, new, autojunk=False).get_opcodes():
        if tag in ("replace", "insert"):
            out.update(range(j1 + 1, j2 + 1))
    return out


class _Runner:
    """The tools on files laid out under a root that has the tree's configuration files."""

    def __init__(self, python: Path, tree: Path, work: Path) -> None:
        self.python, self.work = python, work
        # (tool, path, content) -> what it found: a fix's "after" is the next fix's "before", and
        # yapf takes seconds on a large file
        self._seen: dict[tuple[str, str, bytes], Any] = {}
        work.mkdir(parents=True, exist_ok=True)
        for name in CONFIGS:
            if (tree / name).is_file():
                shutil.copy2(tree / name, work / name)

    def _put(self, path: str, content: bytes) -> None:
        target = self.work / path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(content)

    def yapf(self, path: str, content: bytes) -> list[tuple[int, str, str]]:
        """What yapf would change: (line, "-" or "+", text) for each line it would remove or add
        (an added line at the line it goes before); empty when it leaves the file as it is."""
        if ("yapf", path, content) not in self._seen:
            self._seen["yapf", path, content] = self._yapf(path, content)
        return self._seen["yapf", path, content]  # type: ignore[no-any-return]

    def _yapf(self, path: str, content: bytes) -> list[tuple[int, str, str]]:
        self._put(path, content)
        done = subprocess.run([str(self.python), "-m", "yapf", path], cwd=self.work, capture_output=True, check=False)
        if done.returncode != 0:
            raise EnvironmentProblem(f"yapf failed on {path}: {done.stderr.decode(errors='replace').strip()[-300:]}")
        if done.stdout == content:
            return []
        old = content.decode(patch.ENC, patch.ERRORS).splitlines()
        new = done.stdout.decode(patch.ENC, patch.ERRORS).splitlines()
        out = []
        for tag, i1, i2, j1, j2 in difflib.SequenceMatcher(None, old, new, autojunk=False).get_opcodes():
            out += [(i + 1, "-", old[i]) for i in range(i1, i2) if tag != "equal"]
            out += [(i1 + 1, "+", new[k]) for k in range(j1, j2) if tag != "equal"]
        return out

    def ruff(self, path: str, content: bytes) -> list[tuple[int, str, str]]:
        """Each problem ruff finds: (line, code, message)."""
        if ("ruff", path, content) not in self._seen:
            self._seen["ruff", path, content] = self._ruff(path, content)
        return self._seen["ruff", path, content]  # type: ignore[no-any-return]

    def _ruff(self, path: str, content: bytes) -> list[tuple[int, str, str]]:
        self._put(path, content)
        done = subprocess.run(
            [
                str(self.python),
                "-m",
                "ruff",
                "check",
                "--force-exclude",
                "--no-cache",
                "--exit-zero",
                "--output-format",
                "json",
                path,
            ],
            cwd=self.work,
            capture_output=True,
            check=False,
        )
        try:
            found = json.loads(done.stdout or b"[]")
        except ValueError:
            said = done.stderr.decode(errors="replace").strip()[-300:]
            raise EnvironmentProblem(f"ruff failed on {path}: {said}") from None
        return [(p["location"]["row"], p.get("code") or "", p["message"]) for p in found]


def _own(found: list[tuple[int, str, str]], before: list[tuple[int, str, str]], added: set[int]) -> list[int]:
    """The lines of what a tool says of the patched file that it did not say of the file before
    (by what it says, not where: lines move), those on the fix's own lines counted first as new."""
    known = Counter((a, b) for _, a, b in before)
    out = []
    for line, a, b in sorted(found, key=lambda f: f[0] in added):
        if known[a, b]:
            known[a, b] -= 1
        else:
            out.append(line)
    return sorted(out)


def _judge(
    runner: _Runner, hooks_: list[Hook], top_exclude: str, path: str, before: bytes | None, after: bytes | None
) -> FileStyle:
    style = FileStyle(path)
    added = _added(before, after)
    for hook in hooks_:
        if after is None or not hook.covers(path, top_exclude):
            style.checks.setdefault(hook.tool, "not-run")
            continue
        if hook.tool == "yapf":
            found = runner.yapf(path, after)
            mine = _own(found, runner.yapf(path, before) if before is not None else [], added)
            if mine:
                at = spans(set(mine))
                style.problems.append(f"yapf {hook.version} would reformat {path} at lines {at}")
        else:
            found = runner.ruff(path, after)
            mine = _own(found, runner.ruff(path, before) if before is not None else [], added)
            style.problems += [
                f"ruff {hook.version}: {path}:{line}: {code} {msg}" for line, code, msg in found if line in mine
            ]
        style.checks[hook.tool] = "fails" if mine else "passes"
    return style


def _plan(catalog: Catalog, fixes: tuple[str, ...], profile_name: str | None) -> Plan:
    """The plan diff exports for these arguments (see ``diff.export``)."""
    if profile_name:
        return resolve(catalog.fixes, catalog.profile(profile_name), fixes)
    for f in fixes:
        catalog.fix(f)
    holders = [p for p in catalog.profiles.values() if all(f in p.pack for f in fixes)]
    if not holders:
        raise UsageError("no profile has all of these fixes; give --profile")
    plan = resolve(catalog.fixes, holders[0], tuple(f for f in fixes if f in holders[0].opt_ins))
    return restrict(plan, set(fixes))


def check_style(
    catalog: Catalog,
    fixes: tuple[str, ...],
    profile_name: str | None,
    dist: str | None,
    sources: dict[str, Path],
) -> StyleReport:
    if not fixes and not profile_name:
        raise UsageError("name fixes, or a --profile")
    plan = _plan(catalog, fixes, profile_name)
    profile: Profile = plan.profile
    dists = [p.dist for p in profile.pins if (dist is None or p.dist == dist)]
    if not dists:
        raise UsageError(f"--dist {dist!r}: profile {profile.name} pins {', '.join(p.dist for p in profile.pins)}")
    touched = {pc.dist for pc in plan.changes if pc.dist in dists}
    unchecked: dict[str, str] = {}  # dist -> why its patches are not checked
    for d in sorted(touched):
        if d not in sources:
            unchecked[d] = f"not checked: no --source {d}=DIR"
        elif not (sources[d] / ".pre-commit-config.yaml").is_file():
            unchecked[d] = f"not checked: {sources[d]} has no .pre-commit-config.yaml (upstream's checks)"
    configs = {d: hooks(sources[d]) for d in sorted(touched) if d not in unchecked}
    if not configs:
        raise UsageError("no tree to check the patches on: " + "; ".join(f"{d}: {w}" for d, w in unchecked.items()))
    pins: dict[str, str] = {}
    for hooks_, _ in configs.values():
        for hook in hooks_:
            if pins.setdefault(hook.tool, hook.version) != hook.version:
                raise UsageError(f"the trees pin {hook.tool} {pins[hook.tool]} and {hook.version}: check one --dist")
    python = tools_venv(pins)
    current: dict[str, bytes | None] = {}
    reports: dict[tuple[str, str], FixStyle] = {}
    with tempfile.TemporaryDirectory(prefix="fixpack-style-") as tmp:
        runners = {d: _Runner(python, sources[d], Path(tmp) / d) for d in configs}
        for pc in plan.changes:
            key = (pc.change.fix_id, pc.dist)
            if pc.dist in unchecked:
                reports.setdefault(key, FixStyle(pc.change.fix_id, pc.dist, note=unchecked[pc.dist]))
            if pc.dist not in configs:
                continue
            path = pc.change.path
            if path not in current:
                target = sources[pc.dist] / path
                current[path] = target.read_bytes() if target.is_file() else None
            before = current[path]
            try:
                after = patch.apply(rebuild.parsed(pc.change), before)
            except patch.HunkFailed as exc:
                raise Refused(
                    f"{pc.change.fix_id}: does not apply to {sources[pc.dist]}: {exc}", fix_id=pc.change.fix_id
                ) from None
            current[path] = after
            report = reports.setdefault(key, FixStyle(pc.change.fix_id, pc.dist))
            hooks_, top = configs[pc.dist]
            report.files.append(_judge(runners[pc.dist], hooks_, top, path, before, after))
    ordered = [reports[(f.id, d)] for f in plan.fixes for d in dists if (f.id, d) in reports]
    for report in ordered:
        if not report.note and all(w == "not-run" for fs in report.files for w in fs.checks.values()):
            report.note = "not checked: the tree's hooks leave its files out (their files/exclude patterns)"
    return StyleReport(profile.name, pins, ordered)
