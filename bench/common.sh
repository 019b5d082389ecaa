# The shared steps of the peer scripts of bench/ (sourced, not run). A script sets `build` (the
# build directory, absolute) and runs from the repository's root before calling these.

# npm_install SRC DST: the pinned packages of SRC (its package.json and package-lock.json) into
# DST with npm ci, skipped when DST already holds that lock (tests/node/npm_ci.cmake).
npm_install() {
  mkdir -p "$2"
  cmake -DSRC="$1" -DDST="$2" -DNPM="$(command -v npm)" -P tests/node/npm_ci.cmake
}

# start_mock OUT [ARGS...]: `parley mock` on a free loopback port (ARGS: --script FILE, ...), its
# first line of output in OUT; sets `url` and `mock_pid`, and stops the mock when the script exits.
# The mock runs in a session of its own (setsid), as a provider's server is not the client's: with
# autogroup scheduling (Linux's default) the CPU is shared between sessions first, so in the
# client's session, under load, the mock and a fast client would split one session's share while
# a slow peer, whose server is mostly idle, kept it whole. (setsid execs the mock in place here: a background
# job of a script is no process group leader, so `mock_pid` is the mock's.)
start_mock() {
  local out=$1
  shift
  rm -f "$out"  # a previous run's URL must not be read before this mock writes its own
  setsid "$build/apps/parley/parley" mock --port 0 "$@" >"$out" 2>/dev/null &
  mock_pid=$!
  trap 'kill $mock_pid 2>/dev/null || true' EXIT
  for _ in $(seq 1 100); do
    [ -s "$out" ] && break
    sleep 0.1
  done
  url=$(head -1 "$out")
}
