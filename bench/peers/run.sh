#!/usr/bin/env bash
# Every peer comparison of parley in one command, each a ratio measured in the same run on this
# machine: prints the machine, then each comparison's table, or why a peer could not run here.
#   bench/peers/run.sh [--tiny] [BUILD_DIR]     (default: build)
# Each script installs its pinned npm peers into BUILD_DIR (npm ci, cached in the build tree).
# Needs the parley command, client_bench, tokens_bench, mcp_bench, tool_loop_bench, worker_bench
# and pg_test_cluster built in BUILD_DIR.
# --tiny: each comparison on a tiny input, once (about 2.5 minutes here once the npm packages are
# installed, the figures are noise). PARLEY_PEERS_QUICK=1 leaves out the three comparisons whose
# peers are large npm installs (tool loop, queue, service): the README test runs `--tiny` so, and
# the ctest test bench.peers (-DPARLEY_PEER_BENCH_TEST=ON, label peers) runs them all.
# A comparison that fails is reported and the others still run; the exit status is that of the
# last failure (0 when every one ran).
set -uo pipefail
root=$(cd "$(dirname "$(realpath "$0")")/../.." && pwd)
build=build
tiny=()
for arg in "$@"; do
  case "$arg" in
    --tiny) tiny=(--tiny) ;;
    *) build=$arg ;;
  esac
done
build=$(realpath "$build")
status=0

echo "machine: $(nproc) cores, $(sed -n 's/^model name\s*: //p' /proc/cpuinfo | head -1)," \
  "$(awk '/MemTotal/ {printf "%.0f GiB", $2 / 1048576}' /proc/meminfo), load $(cut -d' ' -f1-3 /proc/loadavg);" \
  "node $(node --version 2>/dev/null || echo missing); parley $(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo '?')"

section() {
  local title=$1
  shift
  echo
  echo "== $title"
  local started=$SECONDS
  if ! "$@" 2>"$build/bench/peers-last.err"; then
    status=1
    echo "FAILED: $*"
    tail -5 "$build/bench/peers-last.err"
  fi
  echo "($((SECONDS - started)) s)"
}
mkdir -p "$build/bench"

section "one-turn process: parley ask vs node + openai" "$root/bench/startup/run.sh" "${tiny[@]}" "$build"
section "tokens: parley BPE vs npm tiktoken and gpt-tokenizer" "$root/bench/tokens/run.sh" "${tiny[@]}" "$build"
section "stream assembly: parley vs the official SDKs" "$root/bench/stream/run.sh" "${tiny[@]}" "$build"
section "MCP tools/call: parley vs the TypeScript SDK" "$root/bench/mcp/run.sh" "${tiny[@]}" "$build"
if [ "${PARLEY_PEERS_QUICK:-0}" = 1 ]; then
  echo
  echo "(PARLEY_PEERS_QUICK=1: the tool loop, durable runs and service comparisons left out)"
  exit $status
fi
section "tool loop: parley vs @openai/agents and ai" "$root/bench/toolloop/run.sh" "${tiny[@]}" "$build"
section "durable runs: parley vs graphile-worker (an empty job, a turn) and DBOS on one PostgreSQL" \
  "$root/bench/queue/run.sh" "${tiny[@]}" "$build"
section "service: parley serve vs the LangGraph API server" "$root/bench/service/run.sh" "${tiny[@]}" "$build"
exit $status
