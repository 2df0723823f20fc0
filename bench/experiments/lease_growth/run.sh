#!/usr/bin/env bash
# Issue 12's growth bound for lease mode ("table + index growth during the hold no more than the
# messages produced"), measured on three bare designs of the same message row, without pgqueue's
# functions: how much of the growth is the lease itself, and what a lease kept in a narrow row of
# a table of its own (the message's row never updated) would give.
#
# usage: run.sh CONNINFO [RATE HOLD BACKLOG CONSUMERS]
#   CONNINFO  libpq options of a server where CREATE DATABASE works and pgqueue is installed (its
#             table pgqueue.message gives the row and indexes: LIKE ... INCLUDING INDEXES);
#             a database lease_growth is made afresh
#   RATE      messages a second, produced and consumed (pgbench -R on both sides; default 500)
#   HOLD      seconds of a held snapshot (case a: REPEATABLE READ that read another table; 60)
#   BACKLOG   messages enqueued and vacuumed before each design's run (default 20000)
#   CONSUMERS pgbench clients consuming (default 4; 2 produce)
# DESIGNS (environment): which of the designs below to run, in order (default "delete update narrow";
#   "hot" is run only when named)
# FILLFACTOR (environment): the hot design's table fillfactor (default 50)
# The designs, each on a fresh copy of the table, one after the other:
#   delete  the take deletes the message (delete mode)
#   update  the lease is an UPDATE of the message's row (locked_until, attempts: pgqueue's lease,
#           a new version of the row and of its index entries), the completion a DELETE
#   narrow  the lease is an INSERT into lg.lease (id, queue_id, until, token) and the take skips
#           messages that have one (NOT EXISTS); the completion deletes both rows, the message's
#           first (deleting the lease first deadlocked with a take that had locked the message
#           and waited on the lease's key)
#   hot     update's statements on a table that no index reads locked_until or attempts of (the
#           ready index without its predicate, no index of the leases) and whose pages keep
#           free space (FILLFACTOR): a lease is then a HOT update, its new version on the same
#           page and no new index entry; the take filters leased messages on the row
# Each consumer walks from its own last take (a client-side cursor, as held_pgbench/run.sh's
# bare mode), so that no design walks the hold's dead entries from the bottom; the narrow
# design's consumers may still fall behind (their completions wait on takes: docs/performance.md,
# "Session 64"), which the line below reports.
# Prints, per design: bytes a live message takes (table + indexes of the vacuumed backlog, over
# its count), the growth during the hold (table + indexes, lg.lease included), the messages
# produced and consumed during it, and growth over produced x bytes a live message: the bench's
# "growth vs their size" (bench/report.py, _held_growth_ratio); then the same less the growth of
# the live set (consumers that fell behind leave live messages, not bloat), and the consumers'
# mean latency a run of their script, and the table's updates and how many of them were HOT.
set -euo pipefail
CONN=${1:?conninfo}; RATE=${2:-500}; HOLD=${3:-60}; BACKLOG=${4:-20000}; NC=${5:-4}
DB=lease_growth
W=$(mktemp -d /tmp/lease_growth.XXXXXX); chmod 777 "$W"
export PGOPTIONS="-c synchronous_commit=off"
psql "$CONN dbname=postgres" -qX -v ON_ERROR_STOP=1 -c "DROP DATABASE IF EXISTS $DB" -c "CREATE DATABASE $DB"
D="$CONN dbname=$DB"
psql "$D" -qX -v ON_ERROR_STOP=1 >/dev/null <<'SQL'
CREATE EXTENSION pgqueue;
CREATE SCHEMA lg;
CREATE TABLE lg.other AS SELECT 1 AS x;
-- narrow: a row lock ends with the take's transaction, and a message locked by a take that
-- committed its lease is found again by a take whose snapshot is older than that lease: the
-- INSERT of the lease decides (ON CONFLICT DO NOTHING), and a take that lost goes on past it
CREATE FUNCTION lg.narrow_take(p_k bigint, p_i bigint, OUT k bigint, OUT i bigint, OUT a integer)
LANGUAGE plpgsql AS $$
BEGIN
  LOOP
    SELECT m.dequeue_at, m.id, m.attempts + 1 INTO k, i, a FROM lg.m m
     WHERE m.queue_id = 1 AND m.locked_until IS NULL AND (m.dequeue_at, m.id) > (p_k, p_i)
       AND m.dequeue_at <= lg.now_ms() AND NOT EXISTS (SELECT 1 FROM lg.lease l WHERE l.id = m.id)
     ORDER BY m.dequeue_at, m.id LIMIT 1 FOR UPDATE SKIP LOCKED;
    IF NOT FOUND THEN RAISE EXCEPTION 'nothing to take'; END IF;
    INSERT INTO lg.lease (id, queue_id, until, token) VALUES (i, 1, lg.now_ms() + 30000, a)
    ON CONFLICT (id) DO NOTHING;
    IF FOUND THEN RETURN; END IF;
    p_k := k; p_i := i;
  END LOOP;
END $$;
CREATE FUNCTION lg.now_ms() RETURNS bigint LANGUAGE sql AS $$ SELECT (extract(epoch FROM clock_timestamp()) * 1000)::bigint $$;
SQL
PAYLOAD="convert_to('{\"type\": \"performance test\", \"topic\": \"fifo queue read and write\"}', 'UTF8')"
cat > "$W/produce.sql" <<SQL
INSERT INTO lg.m (id, queue_id, dequeue_at, attempts, created_at, content)
VALUES (nextval('lg.m_id'), 1, lg.now_ms(), 0, lg.now_ms(), $PAYLOAD);
SQL
cat > "$W/delete.sql" <<'SQL'
WITH t AS (SELECT m.id FROM lg.m m WHERE m.queue_id = 1 AND m.locked_until IS NULL AND (m.dequeue_at, m.id) >= (:k, :i)
              AND m.dequeue_at <= lg.now_ms() ORDER BY m.dequeue_at, m.id LIMIT 1 FOR UPDATE SKIP LOCKED)
DELETE FROM lg.m m USING t WHERE m.id = t.id RETURNING m.dequeue_at AS k, m.id AS i \gset
SQL
cat > "$W/update.sql" <<'SQL'
WITH t AS (SELECT m.id FROM lg.m m WHERE m.queue_id = 1 AND m.locked_until IS NULL AND (m.dequeue_at, m.id) >= (:k, :i)
              AND m.dequeue_at <= lg.now_ms() ORDER BY m.dequeue_at, m.id LIMIT 1 FOR UPDATE SKIP LOCKED)
UPDATE lg.m m SET locked_until = lg.now_ms() + 30000, attempts = m.attempts + 1 FROM t WHERE m.id = t.id
RETURNING m.dequeue_at AS k, m.id AS i, m.attempts AS a \gset
DELETE FROM lg.m WHERE id = :i AND attempts = :a;
SQL
cat > "$W/narrow.sql" <<'SQL'
SELECT k, i, a FROM lg.narrow_take(:k, :i) \gset
BEGIN;
DELETE FROM lg.m m WHERE m.id = :i AND EXISTS (SELECT 1 FROM lg.lease l WHERE l.id = :i AND l.token = :a);
DELETE FROM lg.lease WHERE id = :i AND token = :a;
COMMIT;
SQL
size() { psql "$D" -qXAt -c "SELECT pg_total_relation_size('lg.m') + coalesce(pg_total_relation_size(to_regclass('lg.lease')), 0)"; }
for design in ${DESIGNS:-delete update narrow}; do
  psql "$D" -qX -v ON_ERROR_STOP=1 >/dev/null <<SQL
DROP TABLE IF EXISTS lg.m, lg.lease; DROP SEQUENCE IF EXISTS lg.m_id;
CREATE SEQUENCE lg.m_id;
CREATE TABLE lg.m (LIKE pgqueue.message INCLUDING INDEXES);
CREATE TABLE lg.lease (id bigint PRIMARY KEY, queue_id integer NOT NULL, until bigint NOT NULL, token integer NOT NULL);
CREATE INDEX ON lg.lease (queue_id, until, id);
SQL
  [ "$design" = narrow ] || psql "$D" -qX -c "DROP TABLE lg.lease" >/dev/null
  if [ "$design" = hot ]; then
    # no index reads locked_until or attempts (the ready index without its predicate, no index
    # of the leases), so that a lease is a HOT update when its page has room, which the table's
    # fillfactor leaves: the take filters leased messages on the row, not in the index
    psql "$D" -qX -v ON_ERROR_STOP=1 >/dev/null <<SQL
ALTER TABLE lg.m SET (fillfactor = ${FILLFACTOR:-50});
DO \$\$ DECLARE r record; BEGIN
  FOR r IN SELECT indexrelid::regclass AS i FROM pg_index WHERE indrelid = 'lg.m'::regclass
              AND pg_get_indexdef(indexrelid) ~ 'locked_until|attempts' LOOP
    EXECUTE format('DROP INDEX %s', r.i);
  END LOOP;
END \$\$;
CREATE INDEX m_ready_all ON lg.m (queue_id, dequeue_at, id);
SQL
  fi
  E=$(size)
  psql "$D" -qX -v ON_ERROR_STOP=1 >/dev/null <<SQL
INSERT INTO lg.m (id, queue_id, dequeue_at, attempts, created_at, content)
SELECT nextval('lg.m_id'), 1, lg.now_ms() - 60000, 0, lg.now_ms(), $PAYLOAD FROM generate_series(1, $BACKLOG);
VACUUM ANALYZE lg.m;
SQL
  L=$(size)
  T=$((10 + HOLD + 5))
  (cd "$W" && pgbench -n -f produce.sql -c 2 -j 1 -R "$RATE" -T "$T" --aggregate-interval=1 -l --log-prefix="p_$design" "$D" >"p_$design.out" 2>&1) &
  PP=$!
  # (planned on the statistics of an empty lg.lease, the narrow design's take read it whole,
  # dead rows and all once the hold had piled them up: 74 ms to 4.7 s a script run on average,
  # the consumers falling behind; every design's statements are meant to be index probes)
  (cd "$W" && PGOPTIONS="$PGOPTIONS -c enable_seqscan=off -c enable_hashjoin=off -c enable_mergejoin=off" pgbench -n -f "${design/hot/update}.sql" -D k=0 -D i=0 -c "$NC" -j 2 -R "$RATE" -T "$T" --aggregate-interval=1 -l --log-prefix="c_$design" "$D" >"c_$design.out" 2>&1) &
  PC=$!
  sleep 10
  S0=$(size); H0=$(date +%s)
  (echo "BEGIN ISOLATION LEVEL REPEATABLE READ; SELECT count(*) FROM lg.other;"; sleep "$HOLD"; echo "COMMIT;") | psql "$D" -qX >/dev/null
  H1=$(date +%s); S1=$(size)
  wait $PP $PC
  python3 - "$W" "$design" "$E" "$L" "$S0" "$S1" "$H0" "$H1" "$BACKLOG" <<'PY'
import glob, sys
w, design = sys.argv[1], sys.argv[2]
e, l, s0, s1, h0, h1, backlog = map(int, sys.argv[3:10])
def count(prefix):
    n = 0
    for f in glob.glob(f"{w}/{prefix}.[0-9]*"):
        for line in open(f):
            p = line.split()
            if h0 <= int(p[0]) < h1:
                n += int(p[1])
    return n
produced, consumed = count(f"p_{design}"), count(f"c_{design}")
per = (l - e) / backlog
print(f"{design:7} live message {per:.0f} bytes; growth during the {h1 - h0}-s hold {(s1 - s0) / 2**20:.2f} MiB; "
      f"produced {produced:,}, consumed {consumed:,}; growth {(s1 - s0) / max(produced, 1):.0f} bytes a message "
      f"produced = {(s1 - s0) / max(produced * per, 1):.2f}x its live size; less the live set's change "
      f"({produced - consumed:+,} messages) {(s1 - s0 - (produced - consumed) * per) / max(produced * per, 1):.2f}x")
PY
  grep -h "aborted\|failed transactions: [1-9]" "$W/c_$design.out" "$W/p_$design.out" || true
  sed -n 's/^latency average = \(.*\)/  consumers: latency average \1 a script run/p' "$W/c_$design.out"
  sleep 1  # (the consumers' statistics reach the shared counters when their backends end)
  psql "$D" -qXAt -c "SELECT format('  updates %s, of them HOT %s', n_tup_upd, n_tup_hot_upd) FROM pg_stat_user_tables WHERE relid = 'lg.m'::regclass"
done
rm -rf "$W"
