#!/usr/bin/env bash
# The main job: prepare this machine (system packages, the extension, the virtualenv) and run
# `pgqueue demo` on a throwaway PostgreSQL server. Options are passed on to the demo, e.g.
#   scripts/demo.sh --messages 10000 --rate 0
#   scripts/demo.sh --dashboard          # and the web dashboard at http://127.0.0.1:8080/
set -euo pipefail
cd "$(dirname "$0")/.."

# The demo needs no Java, browser, Node, benchmark peers or pooler: skip the parts of the
# bootstrap that only those test suites need (scripts/test.sh installs them). The bootstrap says what it installs;
# on a machine that has everything it prints nothing.
echo "demo.sh: checking this machine for what the demo needs (scripts/bootstrap.sh)"
PGQUEUE_WITH_SPARK=0 PGQUEUE_WITH_BROWSER=0 PGQUEUE_WITH_NODE=0 PGQUEUE_WITH_BENCH=0 PGQUEUE_WITH_POOLER=0 \
    scripts/bootstrap.sh

exec .venv/bin/pgqueue demo "$@"
