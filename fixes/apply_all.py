#!/usr/bin/env python3
"""Container entry point: ``python3 fixes/apply_all.py --profile v0.26.0 [OPT-IN ...]``, or
``--recipe SLUG [--exec vllm serve ... | --launch]`` (a recipe's fix set, its rules checked first).

The same as ``fixpack apply ARGS``, run from a cookbook checkout with plain ``python3``: the
fixpack package beside this folder is used without being installed.
"""

import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.realpath(__file__)))


def main() -> None:
    sys.path.insert(0, ROOT)
    try:
        start(sys.argv[1:])
    except KeyboardInterrupt:  # Ctrl-C before the command's own handling (imports, the warm path)
        from fixpack.errors import INTERRUPTED, INTERRUPTED_LINE

        print(INTERRUPTED_LINE, file=sys.stderr)
        sys.exit(INTERRUPTED)


def start(argv: list[str]) -> None:
    from fixpack.installation.warm import try_warm  # standard library only

    # A --recipe apply records no stamp (its rules read variables no key holds), so none answers it.
    code = try_warm(argv)
    if code is not None:  # already applied and unchanged: nothing else is imported (--exec: CMD ran)
        sys.exit(code)
    try:
        from fixpack.cli import run_apply_all

        run_apply_all(argv)
    except ModuleNotFoundError as exc:
        # A runtime requirement missing, wherever the apply first imports it: every one is imported
        # before the commit's first write, so nothing has changed. One of fixpack's own is a bug.
        if not exc.name or exc.name.partition(".")[0] == "fixpack":
            raise
        listed = os.path.join(ROOT, "requirements.txt")
        print(
            f"fixpack: error: the Python module {exc.name!r} is missing; install fixpack's requirements with: "
            f"{os.path.basename(sys.executable)} -m pip install -r {listed}",
            file=sys.stderr,
        )
        sys.exit(3)


if __name__ == "__main__":
    main()
