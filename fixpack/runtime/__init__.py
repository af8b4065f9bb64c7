"""Code that runs inside the processes vLLM starts, not inside fixpack: the overlay's start-up
import hook (``hook.py``, installed as ``DIR/sitecustomize.py``) and the runtime check
(``check.py``, installed as the ``fixpack_runtime_check`` plugin of group
``vllm.general_plugins``), with the rank agreement (``agree.py``, the plugin package's ``agree``
module, which the fix fix-set-agreement calls from vLLM's distributed set-up; it imports torch,
lazily, as only a vLLM rank calls it). They are copied, as files, out of this package: standard
library only, no import of fixpack (nor of vLLM), and cheap: they run at every process start.

They read one index, ``fixpack_runtime_check/index.json``, written by ``apply``: ``index.py`` is
its one reader and writer, and describes it.
"""
