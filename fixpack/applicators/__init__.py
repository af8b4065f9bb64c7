"""Kept for fix authors: ``fixpack.applicators.cst`` is the transforms API's first import path."""
