#!/usr/bin/env bash
# Measures parley's BPE against npm `tiktoken` (WASM) and `gpt-tokenizer` in one run:
# single-thread encode throughput on a mixed corpus (>= 10 MB) and on English prose, and the
# load time of each vocabulary. Prints a table with the ratios.
#   usage: bench/tokens/run.sh [BUILD_DIR]      (default: build; needs tokens_bench built)
# Throughput is bytes / CPU time of the encoding thread (the machine may be shared; CPU time
# is steadier than wall time there): Google Benchmark's CPU time for parley,
# process.cpuUsage() around each encode for the peers.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
build=$(cd "${1:-$root/build}" && pwd)
work="$build/bench-tokens"
mkdir -p "$work"

"$root/bench/tokens/make_corpus.sh" "$work/corpus"
"$root/scripts/fetch-vocab.sh" "$build/data"

node_dir="$work/node"
mkdir -p "$node_dir"
if ! cmp -s "$root/bench/node/package-lock.json" "$node_dir/package-lock.json" ||
   [ ! -d "$node_dir/node_modules/gpt-tokenizer" ]; then
  cp "$root/bench/node/package.json" "$root/bench/node/package-lock.json" "$node_dir/"
  (cd "$node_dir" && npm ci --no-audit --no-fund --loglevel=error)
fi

echo "bench: parley (tokens_bench)" >&2
PARLEY_BENCH_CORPUS_DIR="$work/corpus" "$build/bench/tokens_bench" --benchmark_format=json \
  --benchmark_repetitions=3 --benchmark_report_aggregates_only=true >"$work/parley.json"
echo "bench: npm peers" >&2
NODE_PATH="$node_dir/node_modules" node "$root/bench/node/bench.js" \
  "$work/corpus/mixed.txt" "$work/corpus/prose.txt" >"$work/peers.jsonl"

node - "$work/parley.json" "$work/peers.jsonl" <<'JS'
const fs = require("fs");
const parley = JSON.parse(fs.readFileSync(process.argv[2], "utf8"));
const peers = fs.readFileSync(process.argv[3], "utf8").trim().split("\n").map((l) => JSON.parse(l));
const mbps = {};   // [encoding][file][who] = MB/s (CPU time)
const wall = {};   // [encoding][file][who] = MB/s (wall time)
const loadMs = {}; // [encoding][who] = ms
const put = (o, a, b, v) => ((o[a] ??= {})[b] = v);
for (const b of parley.benchmarks) {
  if (b.aggregate_name !== "median") continue;
  const [kind, enc, file] = b.run_name.split("/");
  if (kind === "encode") {
    put(mbps[enc] ??= {}, file, "parley", b.bytes_per_second / 1e6);
    // real_time is per iteration, in ms; bytes per iteration = CPU rate * CPU time.
    const bytes = (b.bytes_per_second * b.cpu_time) / 1e3;
    put(wall[enc] ??= {}, file, "parley", bytes / (b.real_time / 1e3) / 1e6);
  }
  if (kind === "load") put(loadMs, enc, "parley", b.cpu_time);
}
for (const p of peers) {
  if (p.load_ms !== undefined) put(loadMs, p.encoding, p.peer, p.load_ms);
  else {
    put(mbps[p.encoding] ??= {}, p.file, p.peer, p.bytes / p.seconds / 1e6);
    put(wall[p.encoding] ??= {}, p.file, p.peer, p.bytes / p.wall_seconds / 1e6);
  }
}
const f = (x) => (x === undefined ? "-" : x.toFixed(1));
for (const [title, table] of [["CPU time", mbps], ["wall time", wall]]) {
console.log(`encode throughput, single thread, MB/s (${title})`);
console.log("encoding      corpus       parley  tiktoken  gpt-tokenizer  vs tiktoken  vs gpt-tokenizer");
for (const enc of Object.keys(table)) {
  for (const file of Object.keys(table[enc])) {
    const r = table[enc][file];
    console.log(`${enc.padEnd(13)} ${file.padEnd(12)} ${f(r.parley).padStart(6)} ${f(r.tiktoken).padStart(9)} ` +
      `${f(r["gpt-tokenizer"]).padStart(14)} ${(f(r.parley / r.tiktoken) + "x").padStart(12)} ` +
      `${(f(r.parley / r["gpt-tokenizer"]) + "x").padStart(17)}`);
  }
}
console.log("");
}
console.log("vocabulary load time, ms (CPU time)");
console.log("encoding      parley  tiktoken  gpt-tokenizer");
for (const enc of Object.keys(loadMs)) {
  const r = loadMs[enc];
  console.log(`${enc.padEnd(13)} ${f(r.parley).padStart(6)} ${f(r.tiktoken).padStart(9)} ${f(r["gpt-tokenizer"]).padStart(14)}`);
}
JS
