"""Making a fix: from a maintainer's hand edits (record), from an upstream commit (record
--from-commit), and its lock of fingerprints (lock)."""
