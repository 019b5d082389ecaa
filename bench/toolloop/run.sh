#!/usr/bin/env bash
# The tool loop: one turn of a prompt, the model's tool call, the tool run and the model's answer,
# a fresh conversation each turn, against the same `parley mock` (one process, the same script) in
# the same run: parley (bench/tool_loop_bench.cpp) against `@openai/agents` and the Vercel AI SDK
# (`ai` + `@ai-sdk/openai`, bench/toolloop/peer.mjs), over Chat Completions and Responses, each
# client its own process, in turn. Prints each one's client CPU (the whole process) and wall time
# per turn, and how many times less CPU parley uses.
#   bench/toolloop/run.sh [--tiny] [BUILD_DIR]     (default: build)
# Installs the pinned peers (bench/toolloop/package-lock.json) into BUILD_DIR/bench/toolloop-node.
# --tiny: 20 turns each (the README test checks that the script works); else 300.
set -euo pipefail
build=build
turns=300
for arg in "$@"; do
  case "$arg" in
    --tiny) turns=20 ;;
    *) build=$arg ;;
  esac
done
build=$(realpath "$build")
cd "$(dirname "$(realpath "$0")")/../.."
. bench/common.sh
work="$build/bench/toolloop-node"
npm_install "$PWD/bench/toolloop" "$work"

# Every client offers get_weather; the model calls it, then answers from its result.
cat >"$work/script.jsonl" <<'JSONL'
{"name": "answer", "match": {"last_role": "tool"}, "reply": {"content": "In Oslo: {{last_tool}}"}}
{"name": "call", "match": {"tool": "get_weather"}, "reply": {"tool_calls": [{"name": "get_weather", "arguments": {"city": "Oslo"}}]}}
JSONL
start_mock "$work/mock.out" --script "$work/script.jsonl"

: >"$work/results.jsonl"
for protocol in chat responses; do
  "$build/bench/tool_loop_bench" "$url" "$protocol" "$turns" >>"$work/results.jsonl"
  for peer in agents ai; do
    node "$work/peer.mjs" "$peer" "$url" "$protocol" "$turns" >>"$work/results.jsonl"
  done
done

node - "$work/results.jsonl" "$turns" <<'JS'
const fs = require('fs');
const rows = fs.readFileSync(process.argv[2], 'utf8').trim().split('\n').map((l) => JSON.parse(l));
console.log(`tool loop: one turn (a tool call, the tool, the answer) against the same parley mock, ` +
            `${process.argv[3]} turns each`);
console.log('protocol   client                   CPU ms/turn  wall ms/turn  parley uses less CPU');
for (const protocol of ['chat', 'responses']) {
  const parley = rows.find((r) => r.protocol === protocol && r.peer === 'parley');
  for (const r of rows.filter((x) => x.protocol === protocol)) {
    const ratio = r === parley ? '' : `${(r.cpu_ms_per_turn / parley.cpu_ms_per_turn).toFixed(1)}x`;
    console.log(`${protocol.padEnd(10)} ${r.peer.padEnd(24)} ${r.cpu_ms_per_turn.toFixed(2).padStart(11)} ` +
                `${r.wall_ms_per_turn.toFixed(2).padStart(13)}  ${ratio.padStart(20)}`);
  }
}
JS
