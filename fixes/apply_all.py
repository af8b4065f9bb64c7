#!/usr/bin/env python3
"""Container entry point: ``python3 fixes/apply_all.py --profile v0.26.0 [OPT-IN ...]``.

The same as ``fixpack apply ARGS``, run from a cookbook checkout with plain ``python3``: the
fixpack package beside this folder is used without being installed.
"""

import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.realpath(__file__)))


def requirements() -> dict[str, str]:
    """Module -> requirement, from the one list fixpack's pyproject.toml reads too. Each name is
    its import name; the one marker used there (python_version < "X.Y") is evaluated here."""
    out: dict[str, str] = {}
    try:
        with open(os.path.join(ROOT, "requirements.txt"), encoding="utf-8") as fh:
            lines = fh.readlines()
    except OSError:  # a cookbook copied without it: the imports themselves will say what is missing
        return out
    for line in lines:
        spec, _, marker = line.split("#", 1)[0].strip().partition(";")
        if not spec:
            continue
        if marker.strip().startswith("python_version <"):
            bound = tuple(int(x) for x in marker.split("<", 1)[1].strip(" \"'").split("."))
            if sys.version_info[:2] >= bound:
                continue
        name = spec.split(">", 1)[0].split("=", 1)[0].split("<", 1)[0].split("[", 1)[0].strip()
        out[name] = spec.strip()
    return out


def absent(module: str) -> bool:
    """Whether a module cannot be found (found, not imported: a plain apply never loads click)."""
    from importlib.util import find_spec

    try:
        return find_spec(module) is None
    except (ImportError, ValueError):
        return True


def leave(code: int) -> None:
    """Exit without the interpreter's teardown (freeing every module and object: about 15 ms of a
    cold container start), which nothing here needs: by now every file fixpack wrote is closed and
    synced and its lock released. Output is flushed first; if that fails, the usual exit says so."""
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except (OSError, ValueError):
        sys.exit(code)
    os._exit(code)


def main() -> None:
    try:
        run(sys.argv[1:])
    except SystemExit as done:
        if done.code is None or isinstance(done.code, int):
            leave(done.code or 0)
        raise


def run(argv: list[str]) -> None:
    sys.path.insert(0, ROOT)
    from fixpack.site.warm import try_warm  # standard library only

    code = try_warm(argv, ROOT)
    if code is not None:  # already applied and unchanged: nothing else is imported (--exec: CMD ran)
        sys.exit(code)
    missing = [requirement for module, requirement in requirements().items() if absent(module)]
    if missing:
        print(
            f"fixpack: error: missing Python packages; install them with:\n"
            f"  {os.path.basename(sys.executable)} -m pip install {' '.join(repr(m) for m in missing)}",
            file=sys.stderr,
        )
        sys.exit(3)
    from fixpack.cli import run_apply_all

    run_apply_all(argv)


if __name__ == "__main__":
    main()
