#!/usr/bin/env bash
# The main job: prepare this machine (system packages, the extension, the virtualenv) and run
# `pgqueue demo` on a throwaway PostgreSQL server. Options are passed on to the demo, e.g.
#   scripts/demo.sh --messages 10000 --rate 0
#   scripts/demo.sh --dashboard          # and the web dashboard at http://127.0.0.1:8080/
set -euo pipefail
cd "$(dirname "$0")/.."

# The demo needs no Java and no browser: skip the Spark and browser-test parts of the bootstrap.
PGQUEUE_WITH_SPARK=0 PGQUEUE_WITH_BROWSER=0 scripts/bootstrap.sh

exec .venv/bin/pgqueue demo "$@"
