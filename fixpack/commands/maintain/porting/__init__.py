"""Carrying the pack to another release (port), and a fix onto another tree (diff --onto)."""
