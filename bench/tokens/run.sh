#!/usr/bin/env bash
# Measures parley's BPE against npm `tiktoken` (WASM) and `gpt-tokenizer` in one run:
# single-thread encode throughput on a mixed corpus (>= 10 MB) and on English prose, and the
# load time of each vocabulary; then the whole `parley tokens FILE` process against a node
# process counting the same 8 MB mixed file with npm tiktoken (start-up, vocabulary, reading
# and counting; the counts must be equal). Prints tables with the ratios.
#   usage: bench/tokens/run.sh [--tiny] [BUILD_DIR]  (default: build; needs tokens_bench and
#          the parley command built)
# Throughput is bytes / CPU time of the encoding thread (the machine may be shared; CPU time
# is steadier than wall time there): Google Benchmark's CPU time for parley,
# process.cpuUsage() around each encode for the peers. The whole-process figures are wall
# times, the best of 3 runs of each, taken in turn.
# --tiny: 100 KB corpora and one run of each (the README test checks that the script works).
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
build="$root/build"
tiny=""
for arg in "$@"; do
  case "$arg" in
    --tiny) tiny=1 ;;
    *) build=$arg ;;
  esac
done
build=$(cd "$build" && pwd)
work="$build/bench-tokens"
mkdir -p "$work"

"$root/bench/tokens/make_corpus.sh" "$work/corpus"
"$root/scripts/fetch-vocab.sh" "$build/data"
corpus="$work/corpus"
whole_bytes=8000000
repetitions=3
runs=3
if [ -n "$tiny" ]; then
  corpus="$work/corpus-tiny"
  mkdir -p "$corpus"
  for f in mixed.txt prose.txt; do
    head -c 100000 "$work/corpus/$f" | iconv -f utf-8 -t utf-8 -c >"$corpus/$f" || true
  done
  whole_bytes=100000
  repetitions=2  # the least that reports a median
  runs=1
fi
# The whole-process input: the first 8 MB of the mixed corpus, cut between characters.
head -c "$whole_bytes" "$work/corpus/mixed.txt" | iconv -f utf-8 -t utf-8 -c >"$work/whole.txt" || true

node_dir="$work/node"
mkdir -p "$node_dir"
if ! cmp -s "$root/bench/tokens/node/package-lock.json" "$node_dir/package-lock.json" ||
   [ ! -d "$node_dir/node_modules/gpt-tokenizer" ]; then
  cp "$root/bench/tokens/node/package.json" "$root/bench/tokens/node/package-lock.json" "$node_dir/"
  (cd "$node_dir" && npm ci --no-audit --no-fund --loglevel=error)
fi

echo "bench: parley (tokens_bench)" >&2
PARLEY_BENCH_CORPUS_DIR="$corpus" "$build/bench/tokens_bench" --benchmark_format=json \
  --benchmark_repetitions="$repetitions" --benchmark_report_aggregates_only=true \
  >"$work/parley.json"
echo "bench: npm peers" >&2
NODE_PATH="$node_dir/node_modules" node "$root/bench/tokens/node/bench.js" \
  "$corpus/mixed.txt" "$corpus/prose.txt" >"$work/peers.jsonl"
echo "bench: whole processes" >&2
NODE_PATH="$node_dir/node_modules" PARLEY_DATA_DIR="$build/data" \
  node "$root/bench/tokens/node/whole_process.js" "$build/apps/parley/parley" "$work/whole.txt" \
  "$runs" >"$work/whole.jsonl"

node - "$work/parley.json" "$work/peers.jsonl" "$work/whole.jsonl" <<'JS'
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
for (const enc of Object.keys(mbps)) {
  for (const file of Object.keys(mbps[enc])) {
    if (mbps[enc][file].parley === undefined) {
      console.error(`bench: no parley figure for ${enc} ${file}`);
      process.exit(1);
    }
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
console.log("");
const whole = fs.readFileSync(process.argv[4], "utf8").trim().split("\n").map((l) => JSON.parse(l));
console.log(`whole process: \`parley tokens FILE\` vs node + npm tiktoken, ${(whole[0].bytes / 1e6).toFixed(1)} MB mixed file, s (best run)`);
console.log("encoding      parley wall  tiktoken wall  parley is   parley CPU  tiktoken CPU  parley is   tokens (equal)");
for (const w of whole) {
  console.log(`${w.encoding.padEnd(13)} ${w.parley_seconds.toFixed(3).padStart(11)} ${w.tiktoken_seconds.toFixed(3).padStart(14)} ` +
    `${((w.tiktoken_seconds / w.parley_seconds).toFixed(1) + "x").padStart(10)} ` +
    `${w.parley_cpu_seconds.toFixed(3).padStart(12)} ${w.tiktoken_cpu_seconds.toFixed(3).padStart(13)} ` +
    `${((w.tiktoken_cpu_seconds / w.parley_cpu_seconds).toFixed(1) + "x").padStart(10)}   ${w.parley_tokens}`);
}
JS
