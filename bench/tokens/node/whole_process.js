// Whole-process timing for bench/tokens/run.sh: `parley tokens --encoding E FILE` against
// `node count.js E FILE` (npm tiktoken), each run RUNS times in turn; the best wall time and the
// best CPU time (user + system, all threads) of each count (start-up, vocabulary load, reading
// and counting included). The counts must be equal. On a shared machine the CPU times are the
// steadier figure; the wall times show what parley's use of every core gives.
//   node whole_process.js PARLEY_BINARY FILE RUNS     prints one JSON object per line:
//   {"encoding","bytes","parley_seconds","tiktoken_seconds","parley_cpu_seconds",
//    "tiktoken_cpu_seconds","parley_tokens","tiktoken_tokens"}
"use strict";
const fs = require("fs");
const path = require("path");
const { spawnSync } = require("child_process");

const [parley, file, runsArg] = process.argv.slice(2);
const runs = Number(runsArg ?? 3);
const bytes = fs.statSync(file).size;

// Runs the command under bash's `time`, which reports the child's user and system CPU time.
function timed(command, args) {
  const script = 'TIMEFORMAT="cpu %3U %3S"; { time "$@" 2>/dev/null; } 2>&1';
  const start = process.hrtime.bigint();
  const run = spawnSync("bash", ["-c", script, "bash", command, ...args], { encoding: "utf8", env: process.env });
  const seconds = Number(process.hrtime.bigint() - start) / 1e9;
  const lines = run.stdout.trim().split("\n");
  const cpu = lines.pop().split(" ");
  if (run.status !== 0 || cpu[0] !== "cpu") throw new Error(`${command} ${args.join(" ")} failed: ${run.stdout}`);
  return { seconds, cpu: Number(cpu[1]) + Number(cpu[2]), count: Number(lines[0]) };
}

for (const encoding of ["cl100k_base", "o200k_base"]) {
  const parleyBest = { seconds: Infinity, cpu: Infinity };
  const peerBest = { seconds: Infinity, cpu: Infinity };
  const keep = (best, run) => {
    best.seconds = Math.min(best.seconds, run.seconds);
    best.cpu = Math.min(best.cpu, run.cpu);
    best.count = run.count;
  };
  for (let i = 0; i < runs; i++) {
    keep(parleyBest, timed(parley, ["tokens", "--encoding", encoding, file]));
    keep(peerBest, timed(process.execPath, [path.join(__dirname, "count.js"), encoding, file]));
  }
  if (parleyBest.count !== peerBest.count) {
    throw new Error(`${encoding}: parley counted ${parleyBest.count}, tiktoken ${peerBest.count}`);
  }
  console.log(JSON.stringify({
    encoding, bytes,
    parley_seconds: parleyBest.seconds, tiktoken_seconds: peerBest.seconds,
    parley_cpu_seconds: parleyBest.cpu, tiktoken_cpu_seconds: peerBest.cpu,
    parley_tokens: parleyBest.count, tiktoken_tokens: peerBest.count,
  }));
}
