"""The pure core: bytes in, bytes out; no file system, subprocess or click."""
