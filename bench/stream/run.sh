#!/usr/bin/env bash
# Stream assembly over loopback: parley's generateStream against the official `openai` npm SDK,
# both reading the same stream from the same `parley mock` process in the same run.
#   bench/stream/run.sh [--tiny] [BUILD_DIR]     (default: build)
# Installs the pinned SDK (bench/stream/package-lock.json) into BUILD_DIR/bench/stream-node with npm ci.
# --tiny: a 1 000-chunk stream, one run each (the README test checks that the script works).
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
echo "mock: $url"

PARLEY_BENCH_BASE_URL="$url" "$build/bench/client_bench" --benchmark_filter='BM_StreamLoopback' \
  --benchmark_repetitions="$runs" --benchmark_report_aggregates_only=false \
  --benchmark_format=json >"$work/parley.json"
node "$work/stream_bench.mjs" "$url" "$bytes" "$runs" >"$work/npm.jsonl"

node - "$work/parley.json" "$work/npm.jsonl" <<'JS'
const fs = require('fs');
const [parleyFile, npmFile] = process.argv.slice(2);
const runs = JSON.parse(fs.readFileSync(parleyFile)).benchmarks.filter((b) => b.run_type === 'iteration');
const best = runs.reduce((a, b) => (a['chunks/s'] > b['chunks/s'] ? a : b));
const parley = { chunks_per_s: best['chunks/s'], mb_per_s: best.bytes_per_second / 1e6,
                 cpu_ms: best.cpu_time, wall_ms: best.real_time };
console.log(`parley generateStream: ${Math.round(parley.chunks_per_s)} chunks/s, ` +
            `${parley.mb_per_s.toFixed(1)} MB/s (wall ${parley.wall_ms.toFixed(1)} ms, ` +
            `client CPU ${parley.cpu_ms.toFixed(1)} ms per stream)`);
for (const line of fs.readFileSync(npmFile, 'utf8').trim().split('\n')) {
  const npm = JSON.parse(line);
  console.log(`${npm.peer}: ${Math.round(npm.chunks_per_s)} chunks/s, ${npm.mb_per_s.toFixed(1)} MB/s` +
              ` -> parley is ${(parley.chunks_per_s / npm.chunks_per_s).toFixed(1)}x`);
}
JS

# The other three protocols: the same reply as an OpenAI Responses, an Anthropic Messages and a
# Gemini stream,
# parley's client of each against that protocol's official SDK.
PARLEY_BENCH_BASE_URL="$url" "$build/bench/client_bench" \
  --benchmark_filter='BM_ProtocolStreamLoopback/[123]' --benchmark_repetitions="$runs" \
  --benchmark_format=json >"$work/protocols.json"
node "$work/protocols_bench.mjs" "$url" "$responses_bytes" "$anthropic_bytes" "$runs" "$gemini_bytes" >"$work/protocols-npm.jsonl"
node - "$work/protocols.json" "$work/protocols-npm.jsonl" <<'JS'
const fs = require('fs');
const [parleyFile, npmFile] = process.argv.slice(2);
const runs = JSON.parse(fs.readFileSync(parleyFile)).benchmarks.filter((b) => b.run_type === 'iteration');
const best = (label) => runs.filter((b) => b.label === label).reduce((a, b) => (a['chunks/s'] > b['chunks/s'] ? a : b));
const npm = fs.readFileSync(npmFile, 'utf8').trim().split('\n').map((l) => JSON.parse(l));
for (const [label, peers] of [['openai-responses', ['openai-node responses iterate', 'openai-node responses assemble']],
                              ['anthropic', ['anthropic-sdk iterate', 'anthropic-sdk assemble']],
                              ['gemini', ['genai generateContentStream', 'genai chat sendMessageStream']]]) {
  const p = best(label);
  console.log(`parley ${label}: ${Math.round(p['chunks/s'])} deltas/s (wall ${p.real_time.toFixed(1)} ms, ` +
              `client CPU ${p.cpu_time.toFixed(1)} ms per stream)`);
  for (const name of peers) {
    const n = npm.find((x) => x.peer === name);
    console.log(`  ${name}: ${Math.round(n.chunks_per_s)} events/s -> parley is ` +
                `${(p['chunks/s'] / n.chunks_per_s).toFixed(1)}x`);
  }
}
JS
