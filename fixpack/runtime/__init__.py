"""Code that runs inside the processes vLLM starts, not inside fixpack: the overlay's start-up
import hook (``hook.py``, installed as ``DIR/sitecustomize.py``) and the runtime check
(``check.py``, installed as the ``fixpack_runtime_check`` plugin of group
``vllm.general_plugins``), with the rank agreement (``agree.py``, the plugin package's ``agree``
module, which the fix fix-set-agreement calls from vLLM's distributed set-up; it imports torch,
lazily, as only a vLLM rank calls it). They are copied, as files, out of this package: standard
library only, no import of fixpack (nor of vLLM), and cheap: they run at every process start.

Both read one index, ``fixpack_runtime_check/index.json``, written by ``apply``:

    {"format": 1, "mode": "in-place" | "overlay", "profile": str, "release": str, "fixes": [str],
     "files": [{"path": repository path, "module": dotted name or null (not a module),
                "file": the patched file (absolute; in an overlay, relative to it) or null (removed),
                "sha256": its hash or null, "original": the installed file an overlay shadows
                (absolute) or null, "pristine": the hash the overlay was built from or null}]}
"""
