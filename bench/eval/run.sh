#!/usr/bin/env bash
# `parley eval` over N cassette-backed cases (default 1000): writes a dataset, records its
# cassettes once against `parley mock`, stops the mock, then times the replayed evaluation.
#
#   bench/eval/run.sh BUILD_DIR [N] [CONCURRENCY]
set -euo pipefail
build=$(cd "${1:-build}" && pwd)
n=${2:-1000}
concurrency=${3:-8}
parley="$build/apps/parley/parley"
work=$(mktemp -d "${TMPDIR:-/tmp}/parley-eval-bench.XXXXXX")
trap 'kill "${mock_pid:-}" 2>/dev/null || true; rm -rf "$work"' EXIT

for ((i = 0; i < n; i++)); do
  printf '{"id": "case-%d", "input": "Say hello to number %d", "expect": {"contains": "number %d", "max_tokens": 10000}}\n' "$i" "$i" "$i"
done >"$work/cases.jsonl"

port=$((20000 + RANDOM % 20000))
"$parley" mock --port "$port" >"$work/mock.log" 2>&1 &
mock_pid=$!
for _ in $(seq 100); do
  (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null && break
  sleep 0.05
done
base="http://127.0.0.1:$port/v1"
"$parley" eval "$work/cases.jsonl" --base-url "$base" --api-key sk-bench --model mock \
  --record "$work/cassettes" --concurrency "$concurrency" >/dev/null
kill "$mock_pid"
wait "$mock_pid" 2>/dev/null || true
mock_pid=

start=$(date +%s.%N)
"$parley" eval "$work/cases.jsonl" --base-url "$base" --api-key sk-bench --model mock \
  --replay "$work/cassettes" --concurrency "$concurrency" --junit "$work/eval.xml" \
  --report "$work/eval.json" | tail -1
end=$(date +%s.%N)
echo "replayed $n cases in $(echo "$end - $start" | bc) s (concurrency $concurrency, nproc $(nproc))"
