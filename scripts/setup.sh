#!/usr/bin/env bash
# Installs every Debian package parley needs, then configures and builds it in ./build.
# Non-interactive and idempotent: run it again at any time.
#   BUILD_DIR=build  where to build      CMAKE_ARGS=...  extra arguments for cmake
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
build_dir=${BUILD_DIR:-build}

sudo_cmd=()
if [ "$(id -u)" -ne 0 ]; then sudo_cmd=(sudo); fi

packages=(
  build-essential cmake pkg-config git ca-certificates
  nlohmann-json3-dev libsimdjson-dev libcurl4-openssl-dev libssl-dev
  libsqlite3-dev libpq-dev postgresql
  zlib1g-dev
  libcpp-httplib-dev libcli11-dev libedit-dev libtomlplusplus-dev
  libgtest-dev libgmock-dev libbenchmark-dev
  tmux chromium
  libicu-dev
  libre2-dev
  nodejs
  prometheus  # promtool checks the service's /metrics (tests/node/otlp)
)
missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  "${sudo_cmd[@]}" apt-get update -qq
  "${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

# npm installs the pinned packages of the compatibility tests (tests/node); some nodejs builds
# bundle it, Debian ships it apart.
if ! command -v npm >/dev/null 2>&1; then
  "${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends npm
fi

# valijson is header-only, but Debian's package depends on Qt, Poco and four other JSON
# libraries; take its headers alone into .deps/ unless the package is installed.
if [ ! -f /usr/include/valijson/validator.hpp ] && [ ! -f .deps/valijson/usr/include/valijson/validator.hpp ]; then
  echo "setup: unpacking valijson headers into .deps/valijson"
  mkdir -p .deps/download
  (cd .deps/download && apt-get download libvalijson-dev >/dev/null)
  dpkg -x .deps/download/libvalijson-dev_*.deb .deps/valijson
fi

if [ -x scripts/fetch-vocab.sh ]; then
  scripts/fetch-vocab.sh "$build_dir/data"
fi

# shellcheck disable=SC2086
cmake -S "$root" -B "$build_dir" -DCMAKE_BUILD_TYPE=${BUILD_TYPE:-RelWithDebInfo} ${CMAKE_ARGS:-}
cmake --build "$build_dir" -j"${JOBS:-2}"
echo "setup: built in $build_dir; run the tests with: ctest --test-dir $build_dir --output-on-failure"
