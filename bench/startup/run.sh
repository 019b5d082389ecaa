#!/usr/bin/env bash
# One non-streamed turn as a whole process: `parley ask --no-stream` against node running the
# official `openai` npm SDK (bench/startup/ask.mjs), both asking the same `parley mock` in the
# same run, in turn. Prints each one's CPU time (user + system) and peak RSS, medians of the
# runs, and the ratios. parley asks with --no-save (the peer keeps nothing either), and saving
# the turn as `parley ask` does by default: to a database that exists (a thread more each run),
# and to a fresh SQLite file (a first use: the schema is made).
#   bench/startup/run.sh [--tiny] [BUILD_DIR]     (default: build)
# Installs the pinned SDK (bench/startup/package-lock.json) into BUILD_DIR/bench/startup-node.
# --tiny: 3 runs of each (the README test checks that the script works); else 21.
set -euo pipefail
build=build
runs=21
for arg in "$@"; do
  case "$arg" in
    --tiny) runs=3 ;;
    *) build=$arg ;;
  esac
done
build=$(realpath "$build")
cd "$(dirname "$(realpath "$0")")/../.."
. bench/common.sh
work="$build/bench/startup-node"
npm_install "$PWD/bench/startup" "$work"
parley="$build/apps/parley/parley"
start_mock "$work/mock.out"

python3 - "$parley" "$url" "$work" "$runs" <<'PY'
import os, statistics, subprocess, sys, tempfile
parley, url, work, runs = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
prompt = "Say hello in one short sentence."
db = tempfile.mkdtemp()
env = dict(os.environ, OPENAI_API_KEY="sk-bench")
existing = os.path.join(db, "existing.db")
commands = {
    "parley ask --no-stream --no-save": [parley, "ask", "--no-stream", "--no-save",
                                         "--base-url", url, "--model", "gpt-4o-mini", prompt],
    "parley ask --no-stream (saved)": [parley, "ask", "--no-stream", "--db", existing,
                                       "--base-url", url, "--model", "gpt-4o-mini", prompt],
    "parley ask --no-stream (new db)": None,  # a fresh database each run
    "node + openai SDK": ["node", os.path.join(work, "ask.mjs"), url, "gpt-4o-mini", prompt],
}
# The database that exists: made (and its first thread saved) before the runs.
subprocess.run(commands["parley ask --no-stream (saved)"], env=env, check=True,
               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
cpu = {k: [] for k in commands}
rss = {k: [] for k in commands}
for i in range(runs):
    for name, argv in commands.items():
        if argv is None:
            argv = [parley, "ask", "--no-stream", "--db", os.path.join(db, "run%d.db" % i),
                    "--base-url", url, "--model", "gpt-4o-mini", prompt]
        pid = os.fork()
        if pid == 0:
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, 1)
            os.dup2(devnull, 2)
            os.execvpe(argv[0], argv, env)
        _, status, usage = os.wait4(pid, 0)
        if status != 0:
            sys.exit("bench: %s failed (status %d)" % (name, status))
        cpu[name].append((usage.ru_utime + usage.ru_stime) * 1000)
        rss[name].append(usage.ru_maxrss / 1024)
peer = "node + openai SDK"
print("one non-streamed turn as a process, against the same parley mock; median of %d runs" % runs)
print("%-34s %10s %10s %12s %12s" % ("process", "CPU ms", "RSS MiB", "CPU vs node", "RSS vs node"))
for name in commands:
    c, r = statistics.median(cpu[name]), statistics.median(rss[name])
    pc, pr = statistics.median(cpu[peer]), statistics.median(rss[peer])
    print("%-34s %10.1f %10.1f %11.1fx %11.1fx" % (name, c, r, pc / c, pr / r))
PY
