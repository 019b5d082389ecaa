// Peer measurements for bench/tokens/run.sh: single-thread encode throughput of npm
// `tiktoken` (WASM) and `gpt-tokenizer` (pure JS) on the given files, and their load times.
//   node bench.js FILE...   prints one JSON object per line:
//   {"peer","encoding","file","bytes","tokens","seconds" (CPU),"wall_seconds"} or
//   {"peer","encoding","load_ms"}
"use strict";
const fs = require("fs");
const path = require("path");

const encodings = ["cl100k_base", "o200k_base"];
const files = process.argv.slice(2).map((f) => ({ name: path.basename(f), text: fs.readFileSync(f, "utf8") }));
const emit = (o) => console.log(JSON.stringify(o));

// The best of `runs` CPU times (user + system of the process, in seconds) and wall times.
function best(runs, fn) {
  let bestSeconds = Infinity;
  let bestWall = Infinity;
  let result;
  for (let i = 0; i < runs; i++) {
    const t0 = process.cpuUsage();
    const w0 = process.hrtime.bigint();
    result = fn();
    const d = process.cpuUsage(t0);
    bestWall = Math.min(bestWall, Number(process.hrtime.bigint() - w0) / 1e9);
    bestSeconds = Math.min(bestSeconds, (d.user + d.system) / 1e6);
  }
  return { seconds: bestSeconds, wall: bestWall, result };
}

for (const enc of encodings) {
  // tiktoken: get_encoding parses the ranks and builds the WASM-side tables.
  const { get_encoding } = require("tiktoken");
  const load = best(1, () => get_encoding(enc));
  emit({ peer: "tiktoken", encoding: enc, load_ms: load.seconds * 1000 });
  const tk = load.result;
  for (const f of files) {
    const bytes = Buffer.byteLength(f.text, "utf8");
    const r = best(2, () => tk.encode(f.text, [], []).length);
    emit({ peer: "tiktoken", encoding: enc, file: f.name, bytes, tokens: r.result, seconds: r.seconds, wall_seconds: r.wall });
  }
  tk.free();

  // gpt-tokenizer: loading is requiring the encoding module (fresh process state per encoding).
  const gtLoad = best(1, () => {
    const m = require(`gpt-tokenizer/cjs/encoding/${enc}`);
    m.encode("warm up the lazy tables");
    return m;
  });
  const gt = gtLoad.result;
  emit({ peer: "gpt-tokenizer", encoding: enc, load_ms: gtLoad.seconds * 1000 });
  const options = { disallowedSpecial: new Set() };
  for (const f of files) {
    const bytes = Buffer.byteLength(f.text, "utf8");
    const r = best(3, () => gt.encode(f.text, options).length);
    emit({ peer: "gpt-tokenizer", encoding: enc, file: f.name, bytes, tokens: r.result, seconds: r.seconds, wall_seconds: r.wall });
  }
}
