#!/usr/bin/env bash
# Prepare a fresh Debian 12 machine for pgqueue: system packages, the extension installed into
# the local PostgreSQL 15, and a virtualenv (.venv) with pinned Python packages and pgqueue itself.
# Safe to run again: each step is skipped when already done, and one that is not says so first.
# PGQUEUE_WITH_SPARK=0, PGQUEUE_WITH_BROWSER=0, PGQUEUE_WITH_NODE=0, PGQUEUE_WITH_BENCH=0 and
# PGQUEUE_WITH_POOLER=0 skip what only the Spark, browser, Node, benchmark and pooler suites need
# (scripts/demo.sh skips all five).
set -euo pipefail
cd "$(dirname "$0")/.."

SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi

# The server's pg_config (scripts/find-pg-config says which) tells where its programs, PGXS
# and extension files are; without one, install PostgreSQL 15 from Debian.
need_apt=()
pg_config=$(scripts/find-pg-config 2>/dev/null || true)
if [ -z "$pg_config" ]; then
    need_apt+=(postgresql-15 postgresql-server-dev-15 postgresql-15-pgtap)
else
    [ -x "$("$pg_config" --bindir)/postgres" ] || need_apt+=(postgresql-15)
    [ -f "$("$pg_config" --pgxs)" ] || need_apt+=(postgresql-server-dev-15)
    [ -f "$("$pg_config" --sharedir)/extension/pgtap.control" ] || need_apt+=(postgresql-15-pgtap)
fi
command -v pg_prove >/dev/null || need_apt+=(libtap-parser-sourcehandler-pgtap-perl)
command -v make >/dev/null || need_apt+=(make)
command -v setpriv >/dev/null || need_apt+=(util-linux)
python3 -c 'import venv, ensurepip' 2>/dev/null || need_apt+=(python3-venv)
# tests/test_node_examples.py runs examples/node with drivers from npm (PGQUEUE_WITH_NODE=0
# skips both; those tests then fail, they never skip)
if [ "${PGQUEUE_WITH_NODE:-1}" = "1" ]; then
    command -v node >/dev/null || need_apt+=(nodejs)
    command -v npm >/dev/null || need_apt+=(npm)
fi
# tests/test_dashboard_browser.py drives Debian's headless chromium through its chromedriver
# (PGQUEUE_WITH_BROWSER=0 skips both; the browser tests then fail, they never skip)
if [ "${PGQUEUE_WITH_BROWSER:-1}" = "1" ]; then
    [ -x /usr/bin/chromium ] || need_apt+=(chromium)
    [ -x /usr/bin/chromedriver ] || need_apt+=(chromium-driver)
fi
# the benchmark suite's peer PgQ, Debian's package for Debian's server (tests/test_bench_smoke.py
# runs it beside pgqueue; PGQUEUE_WITH_BENCH=0 skips it, and those tests then report it missing)
if [ "${PGQUEUE_WITH_BENCH:-1}" = "1" ] \
   && { [ -z "$pg_config" ] || [ "$("$pg_config" --sharedir)" = /usr/share/postgresql/15 ]; } \
   && [ ! -f /usr/share/postgresql/15/extension/pgq.control ]; then
    need_apt+=(postgresql-15-pgq3)
fi
# tests/test_pooler.py runs pgqueue through Debian's PgBouncer in transaction mode
# (PGQUEUE_WITH_POOLER=0 skips it; those tests then fail, they never skip)
if [ "${PGQUEUE_WITH_POOLER:-1}" = "1" ] && ! command -v pgbouncer >/dev/null && [ ! -x /usr/sbin/pgbouncer ]; then
    need_apt+=(pgbouncer)
fi
if [ "${PGQUEUE_WITH_SPARK:-1}" = "1" ] && ! command -v java >/dev/null; then
    need_apt+=(openjdk-17-jre-headless)
fi
if [ ${#need_apt[@]} -gt 0 ]; then
    if [ -n "$SUDO" ] && ! command -v sudo >/dev/null; then
        echo "bootstrap: missing system packages, and there is no sudo to install them as $(id -un): as root, run" \
             "apt-get install ${need_apt[*]}" >&2
        exit 1
    fi
    echo "bootstrap: installing ${need_apt[*]} with apt-get (a few minutes, once)"
    $SUDO apt-get update -q
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q "${need_apt[@]}"
fi

# The extension goes into the server that pg_config names, when its files there are not this
# tree's already (so that a second run as a user that is not root asks sudo for nothing).
pg_config=$(scripts/find-pg-config)
make -s PG_CONFIG="$pg_config" >/dev/null
extdir="$("$pg_config" --sharedir)/extension"
for f in pgqueue.control extension/pgqueue--*.sql build/pgqueue--*.sql; do
    if ! cmp -s "$f" "$extdir/$(basename "$f")"; then
        echo "bootstrap: installing the pgqueue extension into $extdir"
        if [ -w "$extdir" ]; then
            make -s install PG_CONFIG="$pg_config" >/dev/null
        elif [ -n "$SUDO" ] && command -v sudo >/dev/null; then
            sudo make -s install PG_CONFIG="$pg_config" >/dev/null
        else
            echo "bootstrap: $extdir is not writable by $(id -un) and there is no sudo: as root, run" \
                 "make install PG_CONFIG=$pg_config in $(pwd)" >&2
            exit 1
        fi
        break
    fi
done

# The virtualenv, made again (--clear) when it is not whole or not this tree's: a creation
# interrupted before pip was in it failed every later run with ".venv/bin/pip: No such file",
# and a clone moved or copied kept a venv whose scripts and editable install name the old path
# (moved: "exec: .../old/.venv/bin/python3: not found"; copied: the tests ran the other tree's
# package). .venv/.tree records the tree it was made for.
tree=$(pwd -P)
venv_ok() {
    [ -x .venv/bin/python ] && .venv/bin/python -m pip --version >/dev/null 2>&1 || return 1
    if [ -f .venv/.tree ]; then
        [ "$(cat .venv/.tree)" = "$tree" ]
    elif [ -f .venv/.requirements.sha ]; then  # made before .venv/.tree: its package must be ours
        .venv/bin/python -c 'import os, sys, pgqueue
sys.exit(os.path.realpath(pgqueue.__file__) != os.path.realpath("python/pgqueue/__init__.py"))' >/dev/null 2>&1 \
            && echo "$tree" > .venv/.tree
    fi
}
if ! venv_ok; then
    if [ -e .venv ]; then
        echo "bootstrap: .venv is incomplete or was made for another path: making it again"
    else
        echo "bootstrap: creating the virtualenv .venv"
    fi
    python3 -m venv --clear .venv
    echo "$tree" > .venv/.tree
fi
stamp=.venv/.requirements.sha
want=$(cat python/requirements-dev.txt python/pyproject.toml python/pgqueue/_version.py | sha256sum | cut -d' ' -f1)
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
    echo "bootstrap: installing python/requirements-dev.txt and pgqueue into .venv (a minute or two, once)"
    .venv/bin/pip install -q --disable-pip-version-check --upgrade -r python/requirements-dev.txt
    # Our package comes from python/ in this repository, never from the registry (the PyPI
    # project named `pgqueue` is someone else's; ours is pgqueue-sql). Drop the editable install
    # of the name it had before 0.4, then install in compat mode: a .pth path entry that mypy
    # and Spark's data-source discovery can follow, where the default editable finder hides
    # the package from both.
    if .venv/bin/pip show -q pgqueue >/dev/null 2>&1; then
        .venv/bin/pip uninstall -q -y pgqueue
    fi
    .venv/bin/pip install -q --disable-pip-version-check --no-deps --no-build-isolation \
        --config-settings editable_mode=compat -e ./python
    echo "$want" > "$stamp"
fi

# The benchmark suite (bench/, `pgqueue bench`): matplotlib for its plots, PgQueuer (a peer it
# measures). PGQUEUE_WITH_BENCH=0 skips them.
if [ "${PGQUEUE_WITH_BENCH:-1}" = "1" ]; then
    bench_stamp=.venv/.requirements-bench.sha
    bench_want=$(sha256sum python/requirements-bench.txt | cut -d' ' -f1)
    if [ ! -f "$bench_stamp" ] || [ "$(cat "$bench_stamp")" != "$bench_want" ]; then
        echo "bootstrap: installing python/requirements-bench.txt into .venv (the benchmark suite's plots and peers)"
        .venv/bin/pip install -q --disable-pip-version-check -r python/requirements-bench.txt
        echo "$bench_want" > "$bench_stamp"
    fi
fi

# The Spark integration (pgqueue.spark) and its tests: pyspark, py4j and pyarrow (Java is
# installed above). PGQUEUE_WITH_SPARK=0 skips both; the Spark tests then fail, they never skip.
if [ "${PGQUEUE_WITH_SPARK:-1}" = "1" ]; then
    spark_stamp=.venv/.requirements-spark.sha
    spark_want=$(sha256sum python/requirements-spark.txt | cut -d' ' -f1)
    if [ ! -f "$spark_stamp" ] || [ "$(cat "$spark_stamp")" != "$spark_want" ]; then
        echo "bootstrap: installing python/requirements-spark.txt (pyspark is about 430 MB)"
        .venv/bin/pip install -q --disable-pip-version-check -r python/requirements-spark.txt
        echo "$spark_want" > "$spark_stamp"
    fi
fi
