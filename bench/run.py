#!/usr/bin/env python3
"""Run the benchmark suite as a script: ``.venv/bin/python bench/run.py [options]``.

The same as ``python -m bench`` from the repository root; ``main(argv)`` is the entry point
for a ``pgqueue bench`` subcommand.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.cli import main  # noqa: E402

if __name__ == "__main__":
    raise SystemExit(main())
