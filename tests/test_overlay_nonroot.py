"""The RHEL/UBI image's case: site-packages owned by root and read-only, fixpack run as another
uid (uid 2000 there, any uid on OpenShift): ``--overlay`` to a folder that user owns applies, the
site's bytes stay as they were, and that user's processes import the patched code."""

from __future__ import annotations

import os
import sys

from builders import Site, in_child_as
from nonroot import NOBODY, as_nobody, needs_root, warm_imports
from runs import APPLY


def read_only(site: Site) -> None:
    for p in [site.path, *site.path.rglob("*")]:
        os.chown(p, 0, 0)
        os.chmod(p, 0o555 if p.is_dir() else 0o444)


def import_as_nobody(overlay: str, site: Site) -> tuple[int, str]:
    """In a child that is uid 65534: run the overlay's start-up hook as ``site`` would, then import
    a patched module and an untouched one. (This interpreter lives under /root, which that user
    cannot read, so the child is forked rather than started.)"""
    import hashlib  # noqa: F401  (what the hook imports, loaded while /root is readable)
    import importlib.util
    import json  # noqa: F401
    import logging  # noqa: F401

    def work() -> int:
        sys.path[:0] = [overlay, str(site.path)]
        spec = importlib.util.spec_from_file_location("sitecustomize", os.path.join(overlay, "sitecustomize.py"))
        hook = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(hook)
        import vllm.executor as executor
        import vllm_gaudi.runner as runner

        print(runner.f2(), runner.__file__, executor.__file__)
        return 0

    return in_child_as(NOBODY, work)


@needs_root
def test_overlay_as_another_user_over_a_root_owned_read_only_site(shared, monkeypatch):
    book, site = shared
    home = site.path.parent / "home-nobody"
    home.mkdir()
    os.chown(home, NOBODY, NOBODY)
    overlay = home / "overlay"
    warm_imports(book, site, monkeypatch)
    from click.testing import CliRunner

    from fixpack.cli import main

    dry = CliRunner().invoke(main, [*APPLY, "--dry-run", "--site", str(site.path), "--overlay", str(overlay)])
    assert dry.exit_code == 0, dry.output  # imports what the child needs, writes nothing
    read_only(site)
    before = site.snapshot()
    code, out = as_nobody(book, *APPLY, "--site", str(site.path))
    assert code == 3 and "is not writable by uid 65534" in out  # in place: refused, as before
    code, out = as_nobody(book, *APPLY, "--site", str(site.path), "--overlay", str(overlay))
    assert code == 0, out
    assert f"export PYTHONPATH={overlay}" in out
    assert site.snapshot() == before  # the site's bytes (and mtimes) unchanged
    assert {p.stat().st_uid for p in overlay.rglob("*")} == {NOBODY}
    code, out = as_nobody(book, *APPLY, "--site", str(site.path), "--overlay", str(overlay))
    assert code == 0 and "3 already applied" in out
    code, out = import_as_nobody(str(overlay), site)
    assert code == 0, out
    value, patched, untouched = out.split()
    assert value == "20" and patched.startswith(str(overlay)) and untouched == str(site.file("vllm/executor.py"))
    code, out = as_nobody(book, "status", "--site", str(site.path), "--overlay", str(overlay))
    assert code == 0 and "applied" in out and "pending" not in out
    code, out = as_nobody(book, "revert", "--site", str(site.path), "--overlay", str(overlay))
    assert code == 0, out
    assert not overlay.exists() and site.snapshot() == before
