#!/usr/bin/env bash
# The worker as it is (A) against the worker with PATCH applied (B), drain.py's numbers, ROUNDS
# rounds alternated. The patches here are measurements, not changes: no_task_per_message.patch
# hands a message to the handler threads without an asyncio task (no timeouts, no shutdown
# drain: do not run it as a worker), handler_on_loop.patch calls the handler on the event loop
# instead of a thread, lazy_thread_wakeup.patch wakes one handler thread per batch (the jobs still
# waiting 2 ms later wake a thread each). The working tree is restored on exit.
# no_task_per_message.patch and lazy_thread_wakeup.patch were made against the worker as it was
# up to commit 46fc84a (a task and a future a plain-function message): check that commit out to
# run them. The first became the worker's way in session 15; handler_on_loop.patch was made
# again against it, and one_wakeup_a_batch.patch was made against it (tried, not kept).
# bench/experiments/worker_cpu/loop_only.py measured the same patches without a server.
# Since session 16 the plain-function Worker drives the core on threads, without an event loop:
# every patch here applies to the worker up to commit 34e474c only (check it out to run them).
# ab_ref.sh compares an older commit's worker with the working tree's instead.
# Usage (repository root, clean working tree): bench/experiments/worker_cpu/ab.sh DSN PATCH [ROUNDS] [N]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../../.." && pwd)
dsn=$1 patch=$2 rounds=${3:-3} n=${4:-80000}
cd "$repo"
trap 'git apply -R "$patch" 2>/dev/null || true' EXIT
for r in $(seq "$rounds"); do
  echo "A $(.venv/bin/python "$here/drain.py" "$dsn" "$n" 4 1 2>/dev/null | sed 's/^round 1: //')"
  git apply "$patch"
  echo "B $(.venv/bin/python "$here/drain.py" "$dsn" "$n" 4 1 2>/dev/null | sed 's/^round 1: //')"
  git apply -R "$patch"
done
