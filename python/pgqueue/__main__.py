"""``python -m pgqueue``: the ``pgqueue`` command line."""

from __future__ import annotations

from pgqueue.cli import console

console()
