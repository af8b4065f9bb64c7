"""The upstream loop: where each fix stands upstream (upstream), and each fix as the patch
upstream takes (diff), with its commit message."""
