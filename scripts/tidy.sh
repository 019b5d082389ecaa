#!/usr/bin/env bash
# Runs clang-tidy (the checks in .clang-tidy) over the library, the mock and the CLI, using the
# compile commands of a configured build (default ./build) compiled file by file: not a
# PARLEY_UNITY_BUILD one, whose commands name batches of sources (README, "Checks beyond the
# tests"). Prints the warnings; exits 1 when there are any.
#   scripts/tidy.sh [BUILD_DIR] [FILE...]
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
shift || true
if (($# == 0)); then
  mapfile -t files < <(git ls-files 'src/*.cpp' 'src/mock/*.cpp' 'apps/parley/*.cpp')
else
  files=("$@")
fi
out=$(printf '%s\n' "${files[@]}" |
  xargs -P "${JOBS:-2}" -n 1 clang-tidy -p "$build" --quiet 2>/dev/null |
  grep -E '^[^ ].*: (warning|error):' | sort -u || true)
if [[ -n "$out" ]]; then
  printf '%s\n' "$out"
  echo "tidy: $(wc -l <<<"$out") findings" >&2
  exit 1
fi
echo "tidy: clean (${#files[@]} files)"
