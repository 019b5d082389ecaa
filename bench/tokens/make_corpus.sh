#!/usr/bin/env bash
# Builds the benchmark corpora from text every Debian system carries:
#   prose.txt  English prose: the common licenses and packages' copyright files (~4 MB)
#   mixed.txt  >= 10 MB: prose, C/C++ headers, changelogs, man pages in 15 languages
#              (Japanese, Korean, Russian, Chinese when installed, European languages)
# Deterministic for a given machine (sorted file lists). usage: make_corpus.sh OUT_DIR
set -euo pipefail
out=$1
mkdir -p "$out"
# head closes pipes early on purpose: SIGPIPE upstream is expected.
set +o pipefail
if [ -s "$out/mixed.txt" ] && [ -s "$out/prose.txt" ]; then exit 0; fi

{
  cat /usr/share/common-licenses/*
  find /usr/share/doc -name copyright -type f | LC_ALL=C sort | xargs cat 2>/dev/null
} | head -c 4000000 | iconv -f utf-8 -t utf-8 -c >"$out/prose.txt"  # -c: drop cut characters

{
  head -c 3000000 "$out/prose.txt"
  find /usr/include -type f \( -name '*.h' -o -name '*.hpp' -o -name '*.tcc' \) | LC_ALL=C sort |
    xargs cat 2>/dev/null | head -c 3500000
  for lang in ja ko ru zh_CN zh_TW uk de fr es it pl pt_BR cs hu sv tr; do
    [ -d "/usr/share/man/$lang" ] || continue
    find "/usr/share/man/$lang" -name '*.gz' -type f | LC_ALL=C sort | xargs zcat 2>/dev/null |
      head -c 250000
  done
} >"$out/mixed.part"
# Changelogs fill up to 12 MB (at least 2.5 MB of them), whatever man pages are installed.
fill=$((12000000 - $(stat -c %s "$out/mixed.part")))
[ "$fill" -ge 2500000 ] || fill=2500000
{
  cat "$out/mixed.part"
  find /usr/share/doc -name 'changelog*.gz' -type f | LC_ALL=C sort | xargs zcat 2>/dev/null |
    head -c "$fill"
} | iconv -f utf-8 -t utf-8 -c >"$out/mixed.txt"
rm -f "$out/mixed.part"
size=$(stat -c %s "$out/mixed.txt")
if [ "$size" -lt 10000000 ]; then
  echo "make_corpus: mixed.txt is only $size bytes" >&2
  exit 1
fi
