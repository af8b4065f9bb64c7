"""The provenance wing: what a site runs, said to the tools that inventory an image. ``sbom`` writes
the installed state as a CycloneDX document (``facts`` gathers what is applied, from ``status`` and
``diff``; ``merge`` adds it to another tool's document). An image build runs it, after the apply:
it reads the install wing's status and the maintain wing's diff, and sits above both."""
