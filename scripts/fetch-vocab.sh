#!/usr/bin/env bash
# Installs the BPE vocabularies (cl100k_base, o200k_base) into DEST_DIR as plain .tiktoken rank
# files ("<base64 token> <rank>" per line), taken out of the npm `tiktoken` package at a pinned
# version and checked against the sha256 upstream tiktoken pins (docs/architecture.md, "Tokens").
# Idempotent: a file already present with the right hash is left alone. Nothing here runs at
# library run time; the library only reads DEST_DIR.
#   usage: scripts/fetch-vocab.sh DEST_DIR
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)

if [ $# -ne 1 ]; then
  echo "usage: $0 DEST_DIR" >&2
  exit 2
fi
dest=$1
mkdir -p "$dest"

tiktoken_version=1.0.22
declare -A hashes=(
  [cl100k_base]=223921b76ee99bde995b7ff738513eef100fb51d18c93597a113bcffe865b2a7
  [o200k_base]=446a9538cb6c348e3516120d7c08b09f57c36495e2acfffe59a5bf8b0cfb1a2d
)

hash_ok() { [ -f "$1" ] && [ "$(sha256sum "$1" | cut -d' ' -f1)" = "$2" ]; }

missing=()
for name in "${!hashes[@]}"; do
  hash_ok "$dest/$name.tiktoken" "${hashes[$name]}" || missing+=("$name")
done
if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi

if ! command -v npm >/dev/null || ! command -v node >/dev/null; then
  echo "fetch-vocab: node and npm are needed to fetch ${missing[*]} (without them parley only estimates token counts)" >&2
  exit 1
fi

# The npm package is a cache outside the repository's tracked files (.deps/ is ignored).
cache="$root/.deps/npm-tiktoken-$tiktoken_version"
if [ ! -f "$cache/node_modules/tiktoken/package.json" ]; then
  echo "fetch-vocab: installing npm tiktoken@$tiktoken_version into $cache"
  mkdir -p "$cache"
  npm install --prefix "$cache" --no-save --no-package-lock --no-audit --no-fund \
    --loglevel=error "tiktoken@$tiktoken_version" >/dev/null
fi

for name in "${missing[@]}"; do
  tmp="$dest/.$name.tiktoken.tmp"
  # encoders/<name>.json keeps the ranks as lines "! <first rank> <base64> <base64> ...";
  # expand them to one "<base64> <rank>" line per token, the canonical upstream file.
  node -e '
    const fs = require("fs");
    const enc = JSON.parse(fs.readFileSync(process.argv[1], "utf8"));
    const out = [];
    for (const line of enc.bpe_ranks.split("\n")) {
      if (!line) continue;
      const parts = line.split(" ");
      if (parts[0] !== "!") throw new Error("unexpected bpe_ranks line: " + line.slice(0, 40));
      const first = Number(parts[1]);
      for (let i = 2; i < parts.length; i++) out.push(parts[i] + " " + (first + i - 2));
    }
    fs.writeFileSync(process.argv[2], out.join("\n") + "\n");
  ' "$cache/node_modules/tiktoken/encoders/$name.json" "$tmp"
  if ! hash_ok "$tmp" "${hashes[$name]}"; then
    rm -f "$tmp"
    echo "fetch-vocab: $name from tiktoken@$tiktoken_version does not have the pinned sha256" >&2
    exit 1
  fi
  mv "$tmp" "$dest/$name.tiktoken"
  echo "fetch-vocab: installed $dest/$name.tiktoken"
done
