#!/bin/sh
# run_with_mock.sh PARLEY_CLI PROGRAM [ARGS...]: starts `parley mock` on a free port, runs
# PROGRAM with the mock's base URL appended to its arguments, stops the mock, exits as PROGRAM.
set -eu
cli=$1
shift
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
mkfifo "$dir/out"
"$cli" mock --port 0 >"$dir/out" &
mock=$!
exec 3<"$dir/out"
# The mock's first line is its base URL, written once it accepts connections.
IFS= read -r url <&3
status=0
"$@" "$url" || status=$?
kill "$mock" 2>/dev/null || true
wait "$mock" 2>/dev/null || true
exec 3<&-
exit $status
