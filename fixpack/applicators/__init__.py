"""Applicators turn a change into new file bytes: pure functions, bytes in and bytes out."""
