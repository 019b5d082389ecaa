#!/usr/bin/env bash
# Stream assembly over loopback, per protocol: parley's client (client_bench's
# BM_StreamLoopback, BM_ProtocolStreamLoopback) against the official npm SDK of that protocol
# (`openai`, `@anthropic-ai/sdk`, `@google/genai`), both reading the same stream from the same
# `parley mock` process, one protocol after the other (parley, then its peers), so that each ratio
# is measured under the same load.
#   bench/stream/run.sh [--tiny] [BUILD_DIR]     (default: build)
# Installs the pinned SDKs (bench/stream/package-lock.json) into BUILD_DIR/bench/stream-node with
# npm ci. --tiny: a 1 000-chunk stream, one run each (the README test checks that the script works).
# Each line gives the rate (the best of the runs, by wall time) and the client's CPU time per
# stream; a ratio is parley's rate over the peer's, and in brackets the peer's CPU time over
# parley's. The mock is a server of its own (bench/common.sh), as a provider's would be: under
# load it does not take its CPU from the client's share.
set -euo pipefail
build=build
runs=3
for arg in "$@"; do
  case "$arg" in
    --tiny)
      export PARLEY_BENCH_STREAM_CHUNKS=1000
      runs=1
      ;;
    *) build=$arg ;;
  esac
done
build=$(cd "$build" && pwd)
cd "$(dirname "$0")/../.."
. bench/common.sh
work="$build/bench/stream-node"
npm_install "$PWD/bench/stream" "$work"

script="$work/stream.jsonl"
info=$("$build/bench/client_bench" --write-stream-script="$script")
bytes=$(echo "$info" | sed -E 's/^stream: [0-9]+ chunks, ([0-9]+) bytes.*/\1/')
responses_bytes=$(echo "$info" | sed -E 's/.*responses ([0-9]+) bytes.*/\1/')
anthropic_bytes=$(echo "$info" | sed -E 's/.*anthropic ([0-9]+) bytes.*/\1/')
gemini_bytes=$(echo "$info" | sed -E 's/.*gemini ([0-9]+) bytes.*/\1/')
echo "$info"

start_mock "$work/mock.out" --script "$script"
echo "mock: $url; load $(cut -d' ' -f1-3 /proc/loadavg)"

# compare LABEL FILTER PEER_COMMAND...: parley's benchmark FILTER, then the peers, then the lines.
compare() {
  local label=$1 filter=$2
  shift 2
  PARLEY_BENCH_BASE_URL="$url" "$build/bench/client_bench" --benchmark_filter="$filter" \
    --benchmark_repetitions="$runs" --benchmark_format=json >"$work/parley.json"
  "$@" >"$work/npm.jsonl"
  node - "$label" "$work/parley.json" "$work/npm.jsonl" <<'JS'
const fs = require('fs');
const [label, parleyFile, npmFile] = process.argv.slice(2);
const runs = JSON.parse(fs.readFileSync(parleyFile)).benchmarks.filter((b) => b.run_type === 'iteration');
const p = runs.reduce((a, b) => (a['chunks/s'] > b['chunks/s'] ? a : b));
console.log(`parley ${label}: ${Math.round(p['chunks/s'])} deltas/s, ` +
            `${(p.bytes_per_second / 1e6).toFixed(1)} MB/s (wall ${p.real_time.toFixed(1)} ms, ` +
            `client CPU ${p.cpu_time.toFixed(1)} ms per stream)`);
for (const line of fs.readFileSync(npmFile, 'utf8').trim().split('\n')) {
  const n = JSON.parse(line);
  console.log(`  ${n.peer}: ${Math.round(n.chunks_per_s)} events/s (wall ${(n.seconds * 1e3).toFixed(0)} ms, ` +
              `CPU ${n.cpu_ms.toFixed(0)} ms per stream) -> parley is ` +
              `${(p['chunks/s'] / n.chunks_per_s).toFixed(1)}x [${(n.cpu_ms / p.cpu_time).toFixed(1)}x]`);
}
JS
}

compare chat 'BM_StreamLoopback' node "$work/stream_bench.mjs" "$url" "$bytes" "$runs"
for protocol in 1:openai-responses:responses 2:anthropic:anthropic 3:gemini:genai; do
  IFS=: read -r index label peers <<<"$protocol"
  compare "$label" "BM_ProtocolStreamLoopback/$index/" node "$work/protocols_bench.mjs" "$url" \
    "$responses_bytes" "$anthropic_bytes" "$runs" "$gemini_bytes" "$peers"
done
echo "load $(cut -d' ' -f1-3 /proc/loadavg)"
