#!/usr/bin/env bash
# The service: create a thread, run it and stream the run to its end through the official
# LangGraph SDK client, against `parley serve` (SQLite, one worker loop) and the LangGraph JS API
# server (@langchain/langgraph-api in memory, a one-node graph calling ChatOpenAI), both asking
# the same `parley mock`, taking turns in the same run (bench/service/service_bench.mjs). Prints
# p50 and p90 of the round trip, each server's peak RSS, and parley's ratios.
#   bench/service/run.sh [--tiny] [BUILD_DIR]     (default: build)
# Installs the pinned packages (bench/service/package-lock.json) into BUILD_DIR/bench/service-node.
# --tiny: 5 round trips each (the README test checks that the script works); else 100.
set -euo pipefail
build=build
runs=100
for arg in "$@"; do
  case "$arg" in
    --tiny) runs=5 ;;
    *) build=$arg ;;
  esac
done
build=$(realpath "$build")
cd "$(dirname "$(realpath "$0")")/../.."
. bench/common.sh
work="$build/bench/service-node"
npm_install "$PWD/bench/service" "$work"
parley="$build/apps/parley/parley"
start_mock "$work/mock.out"

node "$work/service_bench.mjs" "$parley" "$url" "$runs" >"$work/results.jsonl"
node - "$work/results.jsonl" <<'JS'
const fs = require('fs');
const rows = fs.readFileSync(process.argv[2], 'utf8').trim().split('\n').map((l) => JSON.parse(l));
const parley = rows[0];
console.log(`create a thread + run + stream to the end, the same LangGraph SDK client and parley mock, ` +
            `${parley.runs} round trips each`);
console.log('server                p50 ms  p90 ms  parley faster  peak RSS MiB  parley uses less');
for (const r of rows) {
  const faster = r === parley ? '' : `${(r.p50_ms / parley.p50_ms).toFixed(1)}x`;
  const less = r === parley ? '' : `${(r.peak_rss_mib / parley.peak_rss_mib).toFixed(1)}x`;
  console.log(`${r.server.padEnd(20)} ${r.p50_ms.toFixed(1).padStart(7)} ${r.p90_ms.toFixed(1).padStart(7)} ` +
              `${faster.padStart(14)} ${r.peak_rss_mib.toFixed(1).padStart(13)} ${less.padStart(17)}`);
}
JS
