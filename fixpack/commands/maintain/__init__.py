"""The maintainer's commands, run by whoever keeps the cookbook (at a checkout, or in CI), never at
a container's start: ``verify`` (with its ``mutants`` and ``coverage``), ``port``, ``lock``,
``record``, ``diff`` and ``build-site``, with what verify and port share: the scratch trees
(``trees``) and the proof runs and their outcomes (``proofs``). They read upstream source trees
given with ``--source`` and write the cookbook's fixes/ and profiles/; only ``record`` reads an
installed site, and none writes one."""
