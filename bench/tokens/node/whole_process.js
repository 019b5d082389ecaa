// Whole-process timing for bench/tokens/run.sh: `parley tokens --encoding E FILE` against
// `node count.js E FILE` (npm tiktoken), each run RUNS times in turn; the best wall time of each
// counts (start-up, vocabulary load, reading and counting included). The counts must be equal.
//   node whole_process.js PARLEY_BINARY FILE RUNS     prints one JSON object per line:
//   {"encoding","bytes","parley_seconds","tiktoken_seconds","parley_tokens","tiktoken_tokens"}
"use strict";
const fs = require("fs");
const path = require("path");
const { spawnSync } = require("child_process");

const [parley, file, runsArg] = process.argv.slice(2);
const runs = Number(runsArg ?? 3);
const bytes = fs.statSync(file).size;

function timed(command, args) {
  const start = process.hrtime.bigint();
  const run = spawnSync(command, args, { encoding: "utf8", env: process.env });
  const seconds = Number(process.hrtime.bigint() - start) / 1e9;
  if (run.status !== 0) throw new Error(`${command} ${args.join(" ")} failed: ${run.stderr}`);
  return { seconds, count: Number(run.stdout.trim()) };
}

for (const encoding of ["cl100k_base", "o200k_base"]) {
  let parleyBest = { seconds: Infinity };
  let peerBest = { seconds: Infinity };
  for (let i = 0; i < runs; i++) {
    const p = timed(parley, ["tokens", "--encoding", encoding, file]);
    if (p.seconds < parleyBest.seconds) parleyBest = p;
    const t = timed(process.execPath, [path.join(__dirname, "count.js"), encoding, file]);
    if (t.seconds < peerBest.seconds) peerBest = t;
  }
  if (parleyBest.count !== peerBest.count) {
    throw new Error(`${encoding}: parley counted ${parleyBest.count}, tiktoken ${peerBest.count}`);
  }
  console.log(JSON.stringify({
    encoding, bytes,
    parley_seconds: parleyBest.seconds, tiktoken_seconds: peerBest.seconds,
    parley_tokens: parleyBest.count, tiktoken_tokens: peerBest.count,
  }));
}
