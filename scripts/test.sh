#!/usr/bin/env bash
# Run every pgqueue test suite on this machine, installing what is missing first:
# the pre-commit hooks of .pre-commit-config.yaml (ruff on the Python code), mypy --strict on the
# Python package and on the benchmark suite (bench/), then pytest, which starts one throwaway
# PostgreSQL (as the unprivileged user "postgres" when run as root) and drives pg_regress
# (make installcheck: sql/ and specs/), pg_prove (tests/pgtap/) and the Python tests.
# Extra arguments go to pytest, e.g. scripts/test.sh -k dequeue.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/bootstrap.sh
echo "== pre-commit (ruff check, .pre-commit-config.yaml)"
.venv/bin/pre-commit run --all-files
echo "== mypy --strict python/pgqueue bench"
.venv/bin/mypy --strict --config-file python/pyproject.toml python/pgqueue
.venv/bin/mypy --strict --config-file python/pyproject.toml bench
echo "== pytest"
exec .venv/bin/python -m pytest "$@"
