"""The install wing: what a container start and an operator run on a site. ``apply``, ``status`` and
``revert`` are each written once over a destination (``fixpack.installation.destination``: the installed
site, or an overlay folder, chosen once on the command line); ``pipeline`` holds their steps in
order, ``pins`` the pinned distributions as installed, ``expect`` the ``--expect-fix-set`` check,
``stamping`` the warm stamp a writing apply records, ``recover`` the operator's way out of an
interrupted transaction."""
