#!/usr/bin/env bash
# Two builds of the executor timed against one server: each build's `parley mock` serves in turn
# (PARLEY_BENCH_MOCK_URL), and executor_bench of both builds runs against it, ROUNDS times.
# executor_bench's own in-process mock would time the two builds' mocks too: this separates the
# executor from its server.
#   bench/ab/executor.sh BUILD_A BUILD_B [ROUNDS]     (default 2 rounds)
# Each build needs executor_bench (an executor_bench.cpp that reads PARLEY_BENCH_MOCK_URL) and
# the parley CLI built. Prints the medians of three repetitions of each benchmark.
set -euo pipefail
a=$(realpath "$1")
b=$(realpath "$2")
rounds=${3:-2}
cd "$(dirname "$(realpath "$0")")/../.."
script=$(mktemp)
out=$(mktemp)
trap 'rm -f "$script" "$out"' EXIT
printf '{"reply": {"content": "Hello {{last_user}}"}}\n' >"$script"
for round in $(seq 1 "$rounds"); do
  for server in "$a" "$b"; do
    build=$server
    . bench/common.sh
    start_mock "$out" --script "$script"
    for client in "$a" "$b"; do
      echo "== round $round: server $server, executor $client"
      PARLEY_BENCH_MOCK_URL=$url "$client/bench/executor_bench" \
        --benchmark_filter='BM_ManagerRun/|BM_ExecutorExecute/|BM_ExecutorThroughput/10/' \
        --benchmark_min_time=0.3 --benchmark_repetitions=3 \
        --benchmark_report_aggregates_only=true 2>/dev/null | grep _median
    done
    kill "$mock_pid"
    wait "$mock_pid" 2>/dev/null || true
  done
done
