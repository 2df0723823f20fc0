#!/usr/bin/env bash
# What pgbench's backends wait on while a script runs at N clients: pg_stat_activity sampled every
# 50 ms (wait_event_type:wait_event, "CPU" when none), averaged over the samples: how many of the
# N backends were in each state. Run after run.sh (it uses run.sh's database, cpu_per_call, and
# its queue 'bench'; refill it with run.sh or by hand for a fresh backlog).
# Usage: bench/experiments/cpu_per_call/waits.sh SCRIPT [clients] [seconds]
set -euo pipefail
here=$(cd "$(dirname "$0")/../.." && pwd)
script=$1; clients=${2:-15}; secs=${3:-10}
db=cpu_per_call
python3 - "$secs" "$db" <<'PY' &
import collections, subprocess, sys, time
secs, db = float(sys.argv[1]), sys.argv[2]
query = ("SELECT coalesce(wait_event_type || ':' || wait_event, 'CPU') FROM pg_stat_activity "
         "WHERE application_name = 'pgbench' AND state = 'active';\nSELECT '--';\n")
psql = subprocess.Popen(["psql", "-X", "-A", "-t", "-d", db], stdin=subprocess.PIPE,
                        stdout=subprocess.PIPE, text=True, bufsize=1)
counts, n = collections.Counter(), 0
time.sleep(1)
end = time.time() + secs - 1.5
while time.time() < end:
    psql.stdin.write(query); psql.stdin.flush()
    while (line := psql.stdout.readline().strip()) != "--":
        if line:
            counts[line] += 1
    n += 1
    time.sleep(0.05)
for state, c in counts.most_common(10):
    print(f"{state:40s} {c / n:6.2f}")
print(f"({n} samples)")
PY
pgbench -n -M prepared -c "$clients" -j 2 -T "$secs" -D queue=bench -f "$here/pgbench/$script.sql" $db 2>&1 \
  | grep -E "^tps"
wait
