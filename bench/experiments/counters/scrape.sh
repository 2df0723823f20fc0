#!/usr/bin/env bash
# What scraping `pgqueue metrics` every 5 s costs consumers at full load (issue 15: consumers
# >= 0.95x). One database with the plain install of REV and a backlog of BACKLOG ready messages;
# CLIENTS pgbench clients dequeue (delete mode, prepared statements) for SECONDS seconds, with no
# scraper and (the order swapped every round) with `pgqueue metrics` running and scraped every
# 5 s (each scrape runs queue_stats and queue_counters), ROUNDS times. Prints
# messages/s per phase, the scrapes' own durations, and on/off per round with the median.
# Usage (as a role that may create databases; needs git, make, curl and the repository's .venv):
#   bench/experiments/counters/scrape.sh [conninfo] [seconds] [rounds] [clients] [backlog] [rev]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../../.." && pwd)
conn=${1:-}
secs=${2:-20}
rounds=${3:-3}
clients=${4:-4}
backlog=${5:-1000000}
rev=${6:-HEAD}
work=$(mktemp -d)
port=$((20000 + RANDOM % 20000))
metrics_pid=
cleanup() { [ -n "$metrics_pid" ] && kill "$metrics_pid" 2>/dev/null; rm -rf "$work"; }
trap cleanup EXIT
pgc=$("$repo/scripts/find-pg-config")
git -C "$repo" archive "$rev" | tar -xf - -C "$work"
make -s -C "$work" PG_CONFIG="$pgc" python/pgqueue/sql/pgqueue--0.4.sql >/dev/null
db=counters_scrape
psql -q "$conn" -c "DROP DATABASE IF EXISTS $db" -c "CREATE DATABASE $db" 2>/dev/null
psql -q -v ON_ERROR_STOP=1 -1 "$conn dbname=$db" -f "$work/python/pgqueue/sql/pgqueue--0.4.sql" >/dev/null
psql -q "$conn dbname=$db" -c "SELECT pgqueue.queue_create('bench')" \
  -c "SELECT count(*) FROM pgqueue.message_create_batch('bench', array_fill(convert_to(repeat('x', 100), 'UTF8'), ARRAY[$backlog]))" \
  -c "VACUUM ANALYZE pgqueue.message" >/dev/null
dsn="$conn dbname=$db"
consume() {  # -> messages/s
  pgbench -n -M prepared -c "$clients" -j 1 -T "$secs" -D queue=bench \
    -f "$repo/bench/pgbench/pgqueue_dequeue.sql" "$dsn" 2>/dev/null | sed -n 's/^tps = \([0-9.]*\).*/\1/p'
}
PYTHONPATH="$work/python" "$repo/.venv/bin/python" -m pgqueue metrics --port "$port" --min-interval 0 --dsn "$dsn" \
  > "$work/metrics.log" 2>&1 &
metrics_pid=$!
sleep 2
echo "revision $(git -C "$repo" rev-parse --short "$rev"), backlog $backlog, $clients clients, $secs s a phase"
printf '%-6s %-4s %14s %s\n' round scr 'messages/s' 'scrape durations (s) and ready count'
ratios=()
scraped() {  # round -> messages/s with the scraper running; its readings go to $work/scrapes.<round>
  ( end=$((SECONDS + secs)); while [ $SECONDS -lt $end ]; do
      curl -s "http://127.0.0.1:$port/metrics" \
        | awk '/^pgqueue_scrape_duration_seconds /{d=$2} /^pgqueue_queue_messages\{queue="bench",state="ready"\}/{n=$2} END {printf "%.3f(%d) ", d, n}' >> "$work/scrapes.$1"
      sleep 5; done ) &
  local loop=$!
  consume
  wait $loop
}
for r in $(seq "$rounds"); do  # the order swaps every round, so that a drifting load favours neither
  if [ $((r % 2)) = 1 ]; then off=$(consume); on=$(scraped "$r"); else on=$(scraped "$r"); off=$(consume); fi
  printf '%-6s %-4s %14s\n' "$r" off "$off"
  printf '%-6s %-4s %14s %s\n' "$r" on "$on" "$(cat "$work/scrapes.$r")"
  ratios+=("$(echo "$on $off" | awk '{printf "%.3f", $1/$2}')")
done
echo
sorted=$(printf '%s\n' "${ratios[@]}" | sort -n)
median=$(echo "$sorted" | awk '{a[NR]=$1} END {print (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}')
echo "on/off per round: $(echo $sorted) -> median $median"
