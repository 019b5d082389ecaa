#!/usr/bin/env bash
# Test set-up: installs the pinned npm packages of tests/node (package-lock.json) into DEST.
# Idempotent: does nothing when DEST already holds the same lock file's packages.
#   usage: tests/node/setup.sh DEST
set -euo pipefail
src=$(cd "$(dirname "$0")" && pwd)
dest=$1
mkdir -p "$dest"
if [ -d "$dest/node_modules/tiktoken" ] && cmp -s "$src/package-lock.json" "$dest/package-lock.json"; then
  exit 0
fi
cp "$src/package.json" "$src/package-lock.json" "$dest/"
cd "$dest"
npm ci --no-audit --no-fund --loglevel=error
