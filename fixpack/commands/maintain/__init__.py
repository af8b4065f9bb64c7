"""The maintainer's commands, run by whoever keeps the cookbook (at a checkout, or in CI), never at
a container's start: ``verify`` (with its ``mutants`` and ``coverage``), ``port``, ``lock``,
``record``, ``diff`` and ``build-site``, with the scratch trees (``trees``) the proofs run on. They
read upstream source trees given with ``--source`` and write the cookbook's fixes/ and profiles/;
only ``record`` reads an installed site, and none writes one."""
