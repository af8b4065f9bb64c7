"""Running fixpack as another user than root (uid 65534), as the images that install as root and
run as another user do; ``shared`` in conftest.py is a cookbook and a site that user can read."""

from __future__ import annotations

import os
import py_compile

import pytest
from builders import Cookbook, Site, in_child_as
from runs import APPLY

NOBODY = 65534

needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="needs root to run fixpack as another user")


def pycs(site: Site) -> None:
    """Compiled bytecode beside every module, as an image that ran once has."""
    for rel in ("vllm_gaudi/runner.py", "vllm_gaudi/batch.py", "vllm/sampler.py"):
        py_compile.compile(str(site.file(rel)), doraise=True)


def as_nobody(book: Cookbook, *args: str) -> tuple[int, str]:
    """Run ``fixpack ARGS`` as uid/gid 65534. Returns (exit code, stdout + stderr)."""
    from fixpack.cli import main

    def work() -> int:
        os.environ["FIXPACK_COOKBOOK"] = str(book.root)
        main.main(args=list(args), prog_name="fixpack")
        return 0

    return in_child_as(NOBODY, work)


def warm_imports(book: Cookbook, site: Site, monkeypatch: pytest.MonkeyPatch) -> None:
    """The child cannot read this interpreter's library (/root): import all it needs here, as root,
    with commands that write nothing."""
    from click.testing import CliRunner

    from fixpack.cli import main

    monkeypatch.setenv("FIXPACK_COOKBOOK", str(book.root))
    for args in ([*APPLY, "--dry-run"], ["status"], ["revert", "--dry-run"], ["recover"]):
        assert CliRunner().invoke(main, [*args, "--site", str(site.path)]).exit_code == 0
