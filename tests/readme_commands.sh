#!/usr/bin/env bash
# Runs every command of the README's ```sh blocks, in order, in one shell session, the way a
# newcomer would type them: from a scratch folder that looks like the repository (build/,
# scripts/, bench/ and README.md are links to the real ones), with its own HOME and XDG
# folders, no OPENAI_* variables, and ports 8080 and 8081 replaced by free ones.
#
#   tests/readme_commands.sh SOURCE_DIR BUILD_DIR
#
# A few commands cannot run inside the test suite; each is checked another way:
# - ./scripts/setup.sh and ctest (the test suite itself) must be lines of .ci/run, so CI runs
#   exactly what the README says;
# - a benchmark program (build/bench/...) is run with --benchmark_list_tests=true (the program
#   exists, takes the options given and its filter selects something); a peer script
#   (bench/...) is run whole with --tiny (a tiny input, one run: it installs its peers, measures
#   both sides and prints its table), so a script that cannot run fails here.
# `parley chat` reads "hello", "/usage" and "/quit" from stdin; every other command reads
# /dev/null. A ```toml block whose first line is a comment naming a file (# tools.toml) is
# written to that file first. Fails, naming the command, at the first command that fails.
set -euo pipefail

source_dir=$(cd "$1" && pwd)
build_dir=$(cd "$2" && pwd)
readme="$source_dir/README.md"

work=$(mktemp -d "${TMPDIR:-/tmp}/parley-readme.XXXXXX")
cleanup() { rm -rf "$work"; }
trap cleanup EXIT
[[ -n "${PARLEY_README_KEEP:-}" ]] && trap - EXIT
ln -s "$build_dir" "$work/build"
ln -s "$source_dir/scripts" "$work/scripts"
ln -s "$source_dir/bench" "$work/bench"
ln -s "$readme" "$work/README.md"
mkdir -p "$work/home" "$work/data" "$work/config"
printf 'hello\n/usage\n/quit\n' >"$work/chat-input"

# Two free loopback ports (for 8080 and 8081): ones nothing answers on.
free_port() {
  local base=$((20000 + RANDOM % 20000)) candidate
  for candidate in $(seq "$base" $((base + 200))); do
    if [[ "$candidate" != "${1:-}" ]] && ! (exec 3<>"/dev/tcp/127.0.0.1/$candidate") 2>/dev/null; then
      echo "$candidate"
      return
    fi
  done
}
port=$(free_port)
[[ -n "$port" ]] || { echo "readme: no free port found" >&2; exit 1; }
port2=$(free_port "$port")
[[ -n "$port2" ]] || { echo "readme: no second free port found" >&2; exit 1; }

# The session script, generated from the README.
session="$work/session.sh"
{
  echo 'set -eo pipefail'
  echo 'trap '\''status=$?; trap - ERR; kill $(jobs -p) 2>/dev/null || true; exit $status'\'' EXIT'
  echo 'trap '\''echo "readme: FAILED (exit $?): $BASH_COMMAND" >&2'\'' ERR'
} >"$session"

commands=0
emit() { printf '%s\n' "$@" >>"$session"; }
announce() { emit "$(printf 'echo %q >&2' "readme\$ $1")"; }

block=""        # the language of the fenced block we are in; "" outside one
toml_file=""    # the file a ```toml block is written to
toml_text=""
while IFS= read -r line || [[ -n "$line" ]]; do
  if [[ -z "$block" ]]; then
    if [[ "$line" =~ ^\`\`\`([a-z]*) ]]; then
      block=${BASH_REMATCH[1]:-text}
      toml_file=""
      toml_text=""
    fi
    continue
  fi
  if [[ "$line" == '```' ]]; then
    if [[ "$block" == toml && -n "$toml_file" ]]; then
      emit "cat > $(printf '%q' "$toml_file") <<'PARLEY_README_TOML'" "$toml_text" "PARLEY_README_TOML"
    fi
    block=""
    continue
  fi
  if [[ "$block" == toml ]]; then
    if [[ -z "$toml_text" && "$line" =~ ^#\ ([A-Za-z0-9_./-]+\.toml)$ ]]; then
      toml_file=${BASH_REMATCH[1]}
    fi
    line=${line//8080/$port}
    toml_text+="${toml_text:+$'\n'}${line//8081/$port2}"
    continue
  fi
  [[ "$block" == sh ]] || continue

  # A command: drop its trailing comment (two or more spaces, then #) and blank lines.
  command=$(sed -E 's/[[:space:]]{2,}#.*$//; s/[[:space:]]+$//' <<<"$line")
  [[ -z "$command" || "$command" == \#* ]] && continue
  command=${command//8080/$port}
  command=${command//8081/$port2}
  commands=$((commands + 1))
  announce "$command"
  case "$command" in
    ./scripts/setup.sh* | ctest\ *)
      emit "grep -qxF -- $(printf '%q' "$command") $(printf '%q' "$source_dir/.ci/run") || { echo 'readme: not a line of .ci/run' >&2; false; }"
      ;;
    build/bench/*)
      emit "test -n \"\$($command --benchmark_list_tests=true)\""
      ;;
    bench/*)
      # PARLEY_PEERS_QUICK: bench/peers/run.sh leaves out the comparisons whose peers are large
      # npm installs (the tool loop, the queue, the service); the ctest test bench.peers (label
      # peers, -DPARLEY_PEER_BENCH_TEST=ON) runs them.
      emit "{ PARLEY_PEERS_QUICK=1 $command --tiny; } < /dev/null > \"\$PARLEY_README_WORK/bench.out\" 2>&1 || { cat \"\$PARLEY_README_WORK/bench.out\" >&2; false; }"
      ;;
    *'&')
      emit "$command"
      ;;
    kill\ %*)
      emit "$command" "wait ${command#kill } 2>/dev/null || true"
      ;;
    export\ * | cd\ *)
      emit "$command"
      ;;
    *parley\ chat* | *parley\ chat)
      emit "{ $command; } < \"\$PARLEY_README_WORK/chat-input\""
      ;;
    *)
      emit "{ $command; } < /dev/null"
      ;;
  esac
done <"$readme"

if ((commands < 10)); then
  echo "readme: only $commands commands found in $readme: is the parser still right?" >&2
  exit 1
fi

cd "$work"
env -u OPENAI_BASE_URL -u OPENAI_API_KEY -u OPENAI_MODEL -u PARLEY_CONFIG \
  HOME="$work/home" XDG_DATA_HOME="$work/data" XDG_CONFIG_HOME="$work/config" \
  PARLEY_README_WORK="$work" bash "$session"
echo "readme: all $commands commands ran"
