#!/usr/bin/env bash
# Runs every client scenario of the MCP conformance suite for one protocol revision against a
# client command, one scenario at a time (in parallel, the timing checks of sse-retry fail on a
# loaded machine). Prints each scenario's result; exits 1 if any failed. With
# EXPECTED_FAILURES=FILE (one scenario a line, # comments), the scenarios listed there must fail
# and every other must pass: a regression or a stale line fails the run (2026-07-28, whose
# authorization additions parley does not have yet; 2025-11-25 runs without a list).
#   run_client_scenarios.sh DIR REVISION COMMAND...   (DIR: where the npm fixture installed it)
set -uo pipefail
dir=$1
revision=$2
shift 2
node="$dir/node_modules/.bin/node"
suite="$dir/node_modules/@modelcontextprotocol/conformance/dist/index.js"
scenarios=$("$node" "$suite" list --client --spec-version "$revision" | sed -n 's/^  - \([^ ]*\).*/\1/p')
# Suites from 0.2 run a scenario at the revision asked for (and tell the client with
# MCP_CONFORMANCE_PROTOCOL_VERSION); 0.1 has one revision per scenario and no such option.
at=()
if "$node" "$suite" client --help | grep -q -- --spec-version; then
  at=(--spec-version "$revision")
fi
passed=0
failed=()
for scenario in $scenarios; do
  if "$node" "$suite" client --command "$*" --scenario "$scenario" "${at[@]}" --timeout 60000 \
    -o "$dir/results" >"$dir/last.log" 2>&1; then
    passed=$((passed + 1))
    echo "passed: $scenario"
  else
    failed+=("$scenario")
    echo "FAILED: $scenario"
    sed -n '/Failed Checks:/,$p;/Warning Checks:/,$p' "$dir/last.log"
  fi
done
echo "$passed of $((passed + ${#failed[@]})) client scenarios of $revision passed"
if [ -n "${EXPECTED_FAILURES:-}" ]; then
  expected=$(sed 's/#.*//' "$EXPECTED_FAILURES" | tr -s ' \t' '\n' | sed '/^$/d' | sort)
  actual=$(printf '%s\n' "${failed[@]}" | sed '/^$/d' | sort)
  if [ "$expected" != "$actual" ]; then
    echo "the failures differ from $EXPECTED_FAILURES (< expected, > now):"
    diff <(echo "$expected") <(echo "$actual")
    exit 1
  fi
  echo "the failures are the $(echo "$expected" | sed '/^$/d' | wc -l) expected ones"
  exit 0
fi
[ ${#failed[@]} -eq 0 ]
