"""``python -m bench``: run the benchmark suite (see bench/cli.py)."""

from bench.cli import main

raise SystemExit(main())
