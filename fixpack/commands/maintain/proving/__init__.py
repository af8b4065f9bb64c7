"""Proving the pack: each fix's proof against the pristine and the patched tree (verify), with its
coverage, its mutants and the fixed files' style."""
