#!/usr/bin/env bash
# Issue 14's "10,000 groups >= 0.8x the same queue without groups" for two builds at once, when a
# change is more than functions (an index, say) and ab_patch.sh cannot swap it in: database A
# gets the plain SQL install (python/pgqueue/sql/pgqueue--<version>.sql) of git revision REV,
# database B that of the working tree, each with a plain queue and a grouped queue (group
# concurrency 1, 10,000 groups). Each round runs both queues of both builds, each topped up to
# 300,000 messages and vacuumed before its run (topup.sql), the order of the builds and of the
# queues alternating. pgbench at CLIENTS clients, synchronous_commit off; SCRIPT (default
# pgqueue_dequeue, delete mode; pgqueue_lease_cycle for lease + complete) names the script in
# bench/pgbench/. Prints each run, then per build the medians of grouped and plain and their
# ratio, and the median of the rounds' ratios.
# Usage (a server on the default socket where the role may create databases; make installed):
#   [SCRIPT=pgqueue_lease_cycle] bench/experiments/group_handoff/paired_builds.sh REV [ROUNDS] [SECONDS] [CLIENTS]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../../.." && pwd)
rev=$1 rounds=${2:-6} secs=${3:-5} clients=${4:-4}
script=${SCRIPT:-pgqueue_dequeue}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
git -C "$root" archive "$rev" | tar -x -C "$tmp"
make -s -C "$tmp" >/dev/null
make -s -C "$root" >/dev/null
version=$(sed -n "s/^default_version *= *'\(.*\)'/\1/p" "$root/pgqueue.control")
declare -A sql=([A]="$tmp/python/pgqueue/sql/pgqueue--$version.sql" [B]="$root/python/pgqueue/sql/pgqueue--$version.sql")
for b in A B; do
  db=group_handoff_build_${b,,}
  psql -q -X -d postgres -c "DROP DATABASE IF EXISTS $db" -c "CREATE DATABASE $db" 2>/dev/null
  psql -q -X -1 -v ON_ERROR_STOP=1 -d $db -f "${sql[$b]}" >/dev/null
  psql -q -X -d $db -c "SELECT pgqueue.queue_create('plain')" \
    -c "SELECT pgqueue.queue_create('grouped', p_group_concurrency => 1)" >/dev/null
done
export PGOPTIONS="-c synchronous_commit=off"
run() {  # build, queue, seconds -> transactions/s
  psql -q -X -d group_handoff_build_${1,,} -v queue="$2" -f "$here/topup.sql" >/dev/null
  pgbench -n -M prepared -c "$clients" -j "$(( clients < 2 ? 1 : 2 ))" -T "$3" -D queue="$2" \
    -f "$root/bench/pgbench/$script.sql" group_handoff_build_${1,,} 2>/dev/null | sed -n 's/^tps = \([0-9.]*\).*/\1/p'
}
for b in A B; do run $b grouped 3 >/dev/null; run $b plain 3 >/dev/null; done  # warm-up, not counted
declare -A G P R
for r in $(seq "$rounds"); do
  builds="A B"; [ $((r % 2)) = 0 ] && builds="B A"
  queues="grouped plain"; [ $(((r + 1) / 2 % 2)) = 0 ] && queues="plain grouped"
  for b in $builds; do
    declare -A t
    for q in $queues; do t[$q]=$(run $b $q "$secs"); done
    ratio=$(awk -v g="${t[grouped]}" -v p="${t[plain]}" 'BEGIN { printf "%.3f", g / p }')
    echo "round $r, build $b: grouped ${t[grouped]}, plain ${t[plain]}, ratio $ratio"
    G[$b]="${G[$b]:-} ${t[grouped]}" P[$b]="${P[$b]:-} ${t[plain]}" R[$b]="${R[$b]:-} $ratio"
  done
done
. "$here/median.sh"
for b in A B; do
  mg=$(echo "${G[$b]}" | median) mp=$(echo "${P[$b]}" | median)
  name=$rev; [ $b = B ] && name="working tree"
  echo "$script, build $b ($name): medians grouped $mg, plain $mp ($(awk -v g="$mg" -v p="$mp" 'BEGIN { printf "%.3f", g / p }')); median ratio of the rounds $(echo "${R[$b]}" | median)"
done
for b in A B; do psql -q -X -d postgres -c "DROP DATABASE IF EXISTS group_handoff_build_${b,,}"; done
