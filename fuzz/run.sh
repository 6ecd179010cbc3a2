#!/usr/bin/env bash
# Runs every fuzz target for SECONDS each (default 5; hours for a real campaign:
# `fuzz/run.sh 14400`). Needs the nightly toolchain and cargo-fuzz (`cargo install
# cargo-fuzz`). Each target starts from a copy of its committed seeds (fuzz/seeds/T), plus
# the repository's maps for the map target (and the shared real maps with FUZZ_REAL_MAPS=1); what it
# finds is left in fuzz/corpus (new inputs) and fuzz/artifacts (crashes, which fail the run).
set -euo pipefail
seconds="${1:-5}"
here="$(cd "$(dirname "$0")" && pwd)"
cd "$here"
targets=(frames datagrams token server client map cache record)
for t in "${targets[@]}"; do
  mkdir -p "corpus/$t"
  if [ -d "seeds/$t" ]; then cp -n seeds/"$t"/* "corpus/$t/" 2>/dev/null || true; fi
  extra=()
  if [ "$t" = map ]; then
    extra+=("../maps")
    # The shared real maps (outside the repository) on request: some are megabytes.
    if [ "${FUZZ_REAL_MAPS:-0}" = 1 ] && [ -d ../../shared/maps ]; then extra+=("../../shared/maps"); fi
  fi
  echo "== fuzz $t for ${seconds}s"
  log="corpus/$t.log"
  status=0
  cargo +nightly fuzz run "$t" "corpus/$t" "${extra[@]}" -- \
    -max_total_time="$seconds" -rss_limit_mb=4096 -timeout=20 -print_final_stats=1 \
    >"$log" 2>&1 || status=$?
  grep -E "^stat::(number_of_executed_units|new_units_added|peak_rss_mb)" "$log" || true
  if [ "$status" -ne 0 ]; then
    tail -40 "$log" >&2
    echo "fuzz target $t failed (exit $status); artifacts: $(ls artifacts/"$t" 2>/dev/null)" >&2
    exit 1
  fi
done
