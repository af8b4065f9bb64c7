"""bench/serve.py's timing shim, first on PYTHONPATH in its instrumented servers only (never in a
deployment): loads the overlay's ``sitecustomize.py`` (fixpack's import hook) as ``site`` would and
times it, then times the hook's work in this process: each call of its finder's ``find_spec`` (every
import asks it first) and each read of a patched file by its loader (the read and the hash). Writes
the totals to ``$FIXPACK_BENCH_HOOK_DIR/PID.json`` after each patched file, every 256 finder calls
and at exit. The overlay's hook chains the next ``sitecustomize`` after the overlay on
``sys.path``, so this file, which comes before it, is not run twice."""

import os
import sys
import time

_clock = time.perf_counter
_start = _clock()
# The standard library modules the hook imports at start-up (it and the index's reader), which a
# vLLM process imports anyway: timed apart. hashlib and logging it imports when first needed, inside
# the figures below.
import importlib.machinery  # noqa: E402, F401
import importlib.util  # noqa: E402
import json  # noqa: E402
import re  # noqa: E402, F401
import stat  # noqa: E402, F401

_stdlib = _clock() - _start
import atexit  # noqa: E402 - the shim's own (built in)

_start = _clock()
_overlay = os.environ["FIXPACK_BENCH_OVERLAY"]
_out = os.path.join(os.environ["FIXPACK_BENCH_HOOK_DIR"], f"{os.getpid()}.json")
_spec = importlib.util.spec_from_file_location(
    "fixpack_overlay_sitecustomize", os.path.join(_overlay, "sitecustomize.py")
)
_hook = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_hook)
_stats = {
    "pid": os.getpid(),
    "ppid": os.getppid(),
    "stdlib_ms": _stdlib * 1000,
    "argv": list(getattr(sys, "argv", []))[:2],
    "install_ms": (_clock() - _start) * 1000,
    "find_spec_ms": 0.0,
    "find_spec_calls": 0,
    "load_ms": 0.0,
    "loads": [],
}


def _write():
    with open(_out + ".tmp", "w") as fh:
        json.dump(_stats, fh)
    os.replace(_out + ".tmp", _out)


_finder = _hook.active()
if _finder is not None:
    _find_spec = _finder.find_spec

    def _timed_find_spec(fullname, path=None, target=None):
        start = _clock()
        try:
            return _find_spec(fullname, path, target)
        finally:
            _stats["find_spec_ms"] += (_clock() - start) * 1000
            _stats["find_spec_calls"] += 1
            if _stats["find_spec_calls"] % 256 == 0:
                _write()

    _finder.find_spec = _timed_find_spec
    _get_data = _hook._Loader.get_data

    def _timed_get_data(self, path):
        start = _clock()
        try:
            return _get_data(self, path)
        finally:
            if path == self.path:
                _stats["load_ms"] += (_clock() - start) * 1000
                _stats["loads"].append(self.name)
                _write()

    _hook._Loader.get_data = _timed_get_data
_write()
atexit.register(_write)
