#!/usr/bin/env bash
# `make bench`: every benchmark of test/bench, one release build. Figures are printed
# and appended to $OUT (default: a temp file whose path is printed); copy them into
# test/bench/RESULTS.md with the date and machine.
set -euo pipefail
here=$(dirname "$0")
source "$here/lib.sh"
build_ferrule
export SKIP_BUILD=1
export OUT=${OUT:-$(mktemp /tmp/ferrule-bench-results.XXXXXX)}
echo "machine: $(machine)" >> "$OUT"
bash "$here/throughput.sh"
bash "$here/endpoint_latency.sh"
echo "results appended to $OUT" >&2
