#!/usr/bin/env bash
# Checks the layering of the sources from their #include lines (docs/architecture.md, "Layers").
#
#   model  <  http  <  client | tools | tokens | store | mock | telemetry  <  core
#          <  executor | runs | facade  <  service  <  apps
#
# A file may include headers of its own layer and of lower layers only. The six layers of the
# middle row are peers that do not include each other, and so are the hosts over the core
# (executor, runs, facade): each configures the one tool loop with the core's host kit. The
# command line (apps/) includes only the public headers (include/parley/), the internal mock
# server and the internal service. Prints each violation as
# "file:line: <what> includes <header> (<layer>)" and exits 1 if there is any.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"

# Rank of each layer; peers share a rank.
declare -A rank=(
  [model]=0 [http]=1 [client]=2 [tools]=2 [tokens]=2 [store]=2 [mock]=2 [telemetry]=2
  [core]=3 [executor]=4 [runs]=4 [facade]=4 [service]=5 [apps]=6
)

# The layer of each public header (include/parley/<name>.hpp). A public header that is not listed
# here is itself a violation: every header must say where it belongs.
declare -A public_layer=(
  [errors]=model [event_names]=model [logger]=model [message]=model [server_tools]=model [part]=model [iso_time]=model [usage]=model [cache_diagnostic]=model [detail/persistent_vector]=model
  [version]=model [json]=model [canonical_json]=model [telemetry]=model [sse]=model [toml]=model
  [llm]=client [openai_client]=client [profiles]=client [transport]=client [cassette]=client
  [anthropic_client]=client [gemini_client]=client [responses_client]=client [protocol]=client
  [tools]=tools [thread_pool]=tools [command_tools]=tools [mcp]=tools [a2a]=tools [tool_schema]=tools
  [tokens]=tokens [bpe]=tokens
  [store]=store [run_store]=store [run_request]=store [postgres_store]=store
  [conversation_manager]=core [context_ops]=core [message_store]=core [compression]=core
  [stored_thread]=core [turn_sink]=core [turn_loop]=core [context_snapshot]=core [cost]=core [structured_output]=core [prompt_counter]=core [turn_defaults]=core [event_types]=core [eval]=core [tool_tape]=core
  [executor]=executor [events]=executor [event_log]=executor
  [otlp]=telemetry
  [runs]=runs [worker]=runs [run_replay]=runs
  [ai]=facade
  [parley]=service   # the umbrella header: every host
)

failures=0
report() {
  echo "$1"
  failures=$((failures + 1))
}

# Sets `target` to the layer of an included header, "unlisted" for a public header with no
# layer, or "?" when the header is not one of ours.
layer_of_include() {
  local header=$1
  case "$header" in
    parley/*)
      local name=${header#parley/}
      name=${name%.hpp}
      if [[ -n "${public_layer[$name]:-}" ]]; then
        target=${public_layer[$name]}
      else
        target=unlisted
      fi
      ;;
    */*)
      local dir=${header%%/*}
      if [[ -n "${rank[$dir]:-}" ]]; then target=$dir; else target="?"; fi
      ;;
    *) target="?" ;;
  esac
}

# check <file> <layer> <public-only>
check_file() {
  local file=$1 layer=$2 public_only=$3
  local line_no header target
  while IFS=: read -r line_no header; do
    layer_of_include "$header"
    case "$target" in
      "?") continue ;;
      unlisted)
        report "$file:$line_no: includes $header, a public header with no layer in scripts/check_layers.sh"
        continue
        ;;
    esac
    if [[ "$public_only" == yes && "$header" != parley/* && "$target" != mock &&
          "$target" != service ]]; then
      report "$file:$line_no: the command line includes the internal header $header ($target)"
      continue
    fi
    if ((rank[$target] > rank[$layer])); then
      report "$file:$line_no: $layer includes $header ($target, a higher layer)"
    elif ((rank[$target] == rank[$layer])) && [[ "$target" != "$layer" ]]; then
      report "$file:$line_no: $layer includes $header ($target, a peer layer)"
    fi
  done < <(grep -n '^[[:space:]]*#[[:space:]]*include[[:space:]]*["<]' "$file" \
             | sed -E 's/^([0-9]+):[[:space:]]*#[[:space:]]*include[[:space:]]*["<]([^">]*)[">].*/\1:\2/')
}

# Public headers.
while IFS= read -r file; do
  name=${file#include/parley/}
  name=${name%.hpp}
  layer=${public_layer[$name]:-}
  if [[ -z "$layer" ]]; then
    report "$file: a public header with no layer in scripts/check_layers.sh"
    continue
  fi
  check_file "$file" "$layer" no
done < <(find include/parley -name '*.hpp' | sort)

# Implementation, by folder.
while IFS= read -r file; do
  layer=${file#src/}
  layer=${layer%%/*}
  if [[ -z "${rank[$layer]:-}" ]]; then
    report "$file: not in a layer folder (src/<layer>/)"
    continue
  fi
  check_file "$file" "$layer" no
done < <(find src -name '*.cpp' -o -name '*.hpp' | grep -v '/CMakeLists' | sort)

# The command line.
while IFS= read -r file; do
  check_file "$file" apps yes
done < <(find apps -name '*.cpp' -o -name '*.hpp' | sort)

if ((failures > 0)); then
  echo "check_layers: $failures violation(s)"
  exit 1
fi
echo "check_layers: every include respects the layers"
