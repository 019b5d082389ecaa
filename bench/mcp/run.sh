#!/usr/bin/env bash
# One tools/call round trip (server-everything's `echo`): parley's McpClient (bench/mcp_bench.cpp)
# against the official TypeScript SDK client (bench/mcp/sdk_bench.mjs), over stdio (each its own
# child server) and over Streamable HTTP (one server for both), in the same run.
#   bench/mcp/run.sh [--tiny] [BUILD_DIR]     (default: build)
# --tiny: a fraction of a second per side (the README test checks that the script works).
# Installs the pinned packages of tests/node/mcp (the servers and the SDK) into
# BUILD_DIR/bench/mcp-node with npm ci.
set -euo pipefail
build=build
seconds=2
min_time=
for arg in "$@"; do
  case "$arg" in
    --tiny)
      seconds=0.2
      min_time=--benchmark_min_time=0.05
      ;;
    *) build=$arg ;;
  esac
done
build=$(realpath "$build")
cd "$(dirname "$(realpath "$0")")/../.."  # the repository (this script may be reached through a link)
. bench/common.sh
work="$build/bench/mcp-node"
npm_install "$PWD/tests/node/mcp" "$work"
cp bench/mcp/sdk_bench.mjs "$work/"
node_bin=$(command -v node)
everything="$work/node_modules/@modelcontextprotocol/server-everything/dist/index.js"

port=$(node -e 'const s = require("net").createServer().listen(0, "127.0.0.1", () => { console.log(s.address().port); s.close(); })')
PORT=$port node "$everything" streamableHttp >/dev/null 2>"$work/http.log" &
server_pid=$!
trap 'kill $server_pid 2>/dev/null || true' EXIT
for _ in $(seq 1 100); do
  grep -q "listening on port" "$work/http.log" && break
  sleep 0.1
done
url="http://127.0.0.1:$port/mcp"
echo "server-everything: stdio children, and Streamable HTTP at $url"

PARLEY_BENCH_MCP_NODE="$node_bin" PARLEY_BENCH_MCP_EVERYTHING="$everything" PARLEY_BENCH_MCP_URL="$url" \
  "$build/bench/mcp_bench" --benchmark_format=json --benchmark_out="$work/parley.json" \
  --benchmark_out_format=json $min_time >/dev/null
# parley again over HTTP, speaking 2025-06-18: server-everything answers a 2025-11-25 client (both
# clients negotiate it) about 1 ms later, its priming event (docs/mcp.md), so this line shows
# what of a call's time is the server's revision.
PARLEY_BENCH_MCP_URL="$url" PARLEY_BENCH_MCP_PROTOCOL=2025-06-18 "$build/bench/mcp_bench" \
  --benchmark_filter=Http --benchmark_format=json --benchmark_out="$work/parley-2025-06-18.json" \
  --benchmark_out_format=json $min_time >/dev/null
(cd "$work" && node sdk_bench.mjs "$node_bin" "$everything" "$url" "$seconds") >"$work/sdk.jsonl"

node - "$work/parley.json" "$work/sdk.jsonl" "$work/parley-2025-06-18.json" <<'JS'
const fs = require('fs');
const [parleyFile, sdkFile, oldFile] = process.argv.slice(2);
const parley = {};
for (const b of JSON.parse(fs.readFileSync(parleyFile)).benchmarks) {
  parley[b.name.includes('Stdio') ? 'stdio' : 'http'] = b;  // real_time: us per call
}
for (const line of fs.readFileSync(sdkFile, 'utf8').trim().split('\n')) {
  const sdk = JSON.parse(line);
  const ours = parley[sdk.transport];
  console.log(`${sdk.transport.padEnd(5)}  parley ${ours.real_time.toFixed(0)} us/call ` +
              `(client CPU ${ours.cpu_time.toFixed(0)} us), TypeScript SDK ` +
              `${sdk.us_per_call.toFixed(0)} us/call -> ` +
              `parley takes ${(ours.real_time / sdk.us_per_call).toFixed(2)}x the SDK's time`);
}
const old = JSON.parse(fs.readFileSync(oldFile)).benchmarks[0];
console.log(`http   parley speaking 2025-06-18: ${old.real_time.toFixed(0)} us/call ` +
            `(client CPU ${old.cpu_time.toFixed(0)} us)`);
JS
