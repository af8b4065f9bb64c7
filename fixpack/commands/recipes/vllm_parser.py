"""vLLM's own ``vllm serve`` argument parser, asked in a child process: does each command line
parse, which options does the parser know, which variables does vLLM read. A child, because
importing vLLM takes seconds, sets up its platform and plugins, and must not change fixpack's
process; the child is this file run as a script (standard library and vLLM only).

In the child: ``VLLM_PLUGINS`` is set empty (vllm-gaudi's plugins import habana_frameworks), vLLM's
CPU platform is made the current one before the parser is built (the stock wheel does not detect it
on x86), then ``make_arg_parser(FlexibleArgumentParser())``.
The vLLM is the one this interpreter imports, else the tree of ``FIXPACK_SRC_VLLM`` (repository
layout: DIR/vllm/...)."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["Parsed", "Probe", "probe"]

TIMEOUT_S = 600
_RUN = "import runpy, sys; runpy.run_path(sys.argv[1], run_name='__main__')"


@dataclass
class Parsed:
    ok: bool
    error: str | None = None  # argparse's message, when the line does not parse
    values: dict[str, object] = field(default_factory=dict)  # the options the line set, by dest


@dataclass
class Probe:
    """What vLLM's parser said; ``unavailable`` says why it could not be asked (then all else is empty)."""

    unavailable: str | None = None
    version: str | None = None
    results: list[Parsed] = field(default_factory=list)
    options: set[str] = field(default_factory=set)
    variables: set[str] = field(default_factory=set)


def probe(argvs: list[list[str]]) -> Probe:
    """Parse each argument list (the words after ``vllm serve``) with vLLM's parser."""
    env = dict(os.environ, VLLM_PLUGINS="", PYTHONDONTWRITEBYTECODE="1")
    if importlib.util.find_spec("vllm") is None:
        tree = os.environ.get("FIXPACK_SRC_VLLM")
        if not tree or not (Path(tree) / "vllm" / "__init__.py").is_file():
            return Probe(unavailable="vLLM is not importable here (and FIXPACK_SRC_VLLM names no vLLM tree)")
        env["PYTHONPATH"] = os.pathsep.join(p for p in (tree, env.get("PYTHONPATH")) if p)
    with tempfile.TemporaryDirectory(prefix="fixpack-vllm-parser-") as tmp:
        out = Path(tmp) / "out.json"
        try:
            proc = subprocess.run(
                # run by path from an empty folder: neither this package's folder nor the caller's
                # working directory goes on the child's sys.path, where it could shadow a module
                [sys.executable, "-c", _RUN, str(Path(__file__).resolve()), str(out)],
                input=json.dumps(argvs),
                env=env,
                cwd=tmp,
                capture_output=True,
                text=True,
                timeout=TIMEOUT_S,
            )
        except subprocess.TimeoutExpired:
            return Probe(unavailable=f"vLLM's parser did not answer in {TIMEOUT_S} s")
        if not out.is_file():
            tail = (proc.stderr.strip().splitlines() or ["no output"])[-1]
            return Probe(unavailable=f"vLLM cannot be imported here ({tail})")
        data = json.loads(out.read_text())
    return Probe(
        version=data["version"],
        results=[Parsed(**r) for r in data["results"]],
        options=set(data["options"]),
        variables=set(data["variables"]),
    )


def _child(out: str) -> None:  # pragma: no cover - runs in the child process
    import contextlib
    import io

    import vllm
    import vllm.envs
    import vllm.platforms
    from vllm.platforms.cpu import CpuPlatform

    vllm.platforms._current_platform = CpuPlatform()
    from vllm.entrypoints.openai.cli_args import make_arg_parser
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    parser = make_arg_parser(FlexibleArgumentParser(prog="vllm serve"))
    defaults = vars(parser.parse_args([]))
    results = []
    for argv in json.loads(sys.stdin.read()):
        err = io.StringIO()
        try:
            with contextlib.redirect_stderr(err):
                parsed = vars(parser.parse_args(argv))
        except SystemExit:
            lines = err.getvalue().strip().splitlines() or ["the line does not parse"]
            results.append({"ok": False, "error": lines[-1], "values": {}})
            continue
        changed = {k: v for k, v in parsed.items() if v != defaults.get(k)}
        results.append({"ok": True, "error": None, "values": json.loads(json.dumps(changed, default=str))})
    data = {
        "version": getattr(vllm, "__version__", None),
        "results": results,
        "options": sorted(s for action in parser._actions for s in action.option_strings),
        "variables": sorted(vllm.envs.environment_variables),
    }
    Path(out).write_text(json.dumps(data))


if __name__ == "__main__":  # pragma: no cover - the child process
    _child(sys.argv[-1])
