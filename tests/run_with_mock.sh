#!/usr/bin/env bash
# Runs a program against a fresh `parley mock` (the demo agent) on a free loopback port:
#   run_with_mock.sh PARLEY_CLI PROGRAM [ARGS...]   -> PROGRAM ARGS... BASE_URL
set -euo pipefail
cli=$1
shift
fifo=$(mktemp -u)
mkfifo "$fifo"
"$cli" mock --port 0 > "$fifo" &
mock=$!
trap 'kill "$mock" 2>/dev/null; wait "$mock" 2>/dev/null; rm -f "$fifo"' EXIT
read -r url < "$fifo"
"$@" "$url"
