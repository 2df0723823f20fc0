#!/usr/bin/env bash
# The worker of an older commit REF (A) against the worker of the working tree (B), drain.py's
# numbers, ROUNDS rounds alternated. A runs from a git worktree of REF put first on PYTHONPATH
# (the server, the extension and the bench code are the working tree's for both); the worktree
# is removed on exit. Session 16 compared the asyncio-driven plain-function worker (REF 34e474c)
# with the threads-driven one this way.
# HANDLER (default bench.noop:handle) is drain.py's: bench.noop:handle_async runs the AsyncWorker.
# Usage (repository root): bench/experiments/worker_cpu/ab_ref.sh DSN REF [ROUNDS] [N] [HANDLER]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../../.." && pwd)
dsn=$1 ref=$2 rounds=${3:-3} n=${4:-40000} handler=${5:-bench.noop:handle}
old=$(mktemp -d)
cd "$repo"
git worktree add -q --detach "$old" "$ref"
trap 'git worktree remove --force "$old"' EXIT
for r in $(seq "$rounds"); do
  echo "A $(PYTHONPATH="$old/python" .venv/bin/python "$here/drain.py" "$dsn" "$n" 4 1 postgres "$handler" 2>/dev/null | sed 's/^round 1: //')"
  echo "B $(.venv/bin/python "$here/drain.py" "$dsn" "$n" 4 1 postgres "$handler" 2>/dev/null | sed 's/^round 1: //')"
done
