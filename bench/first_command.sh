#!/bin/bash
# The first command after a cache write, before and after a change, on the 1 GB trace.
#
#   bash bench/first_command.sh BASE_SRC [REPEAT]
#
# BASE_SRC: the src/ of a checkout of the code before (e.g. `git worktree add /tmp/wt-base ffae12b` and
# /tmp/wt-base/src, with its C parts built or copied in). One fresh OPSCOPE_CACHE_DIR; one first open of the trace
# and of a copy of it (diff compares the two) by each checkout (where their cache formats differ, each reads its
# own entry; where they agree, the second open finds the first's); then for each command REPEAT (default 2) rounds
# of "before" and "after", each with the entries' results/ emptied first (so it computes its analyses, as the first
# command after the cache write does), whole processes with -f json; then one "kept" run of this checkout (it reads
# the results the run before kept). Prints "command | who | wall s | peak RSS KB" lines; BENCHMARKS.md gives medians.
set -euo pipefail
BASE_SRC=${1:?usage: bench/first_command.sh BASE_SRC [REPEAT]}
REPEAT=${2:-2}
HERE=$(cd "$(dirname "$0")/.." && pwd)
T=${OPSCOPE_BENCH_TRACE:-/tmp/opscope-bench/big-1gb.json.gz}
C=${T%.json.gz}-copy.json.gz
[ -f "$C" ] || cp "$T" "$C"
export OPSCOPE_CACHE_DIR
OPSCOPE_CACHE_DIR=$(mktemp -d)
trap 'rm -rf "$OPSCOPE_CACHE_DIR"' EXIT
for src in "$BASE_SRC" "$HERE/src"; do
  PYTHONPATH=$src python -m opscope.cli summary "$T" > /dev/null 2>&1
  PYTHONPATH=$src python -m opscope.cli summary "$C" > /dev/null 2>&1
done
run() {  # label, src, command...
  local label=$1 src=$2; shift 2
  PYTHONPATH=$src /usr/bin/time -f "$* | $label | %e s | %M KB" python -m opscope.cli "$@" -f json > /dev/null \
    2> "$OPSCOPE_CACHE_DIR/err" || true
  tail -1 "$OPSCOPE_CACHE_DIR/err"
}
for cmd in "gpu" "gpu --idle" "kernels" "ops" "steps" "memory" "advise" "diff $C"; do
  for _ in $(seq "$REPEAT"); do
    for who in before after; do
      rm -rf "$OPSCOPE_CACHE_DIR"/*/results
      if [ $who = before ]; then src=$BASE_SRC; else src=$HERE/src; fi
      # shellcheck disable=SC2086
      run $who "$src" $cmd "$T"
    done
  done
  # shellcheck disable=SC2086
  run kept "$HERE/src" $cmd "$T"
done
