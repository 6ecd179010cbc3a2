#!/usr/bin/env bash
# This build's tick without the network (tick-bench) against another build's, in one
# alternated run (not a CI test): ROUNDS runs of each in turn, then the medians of the
# µs per snapshot and per player-tick, and the median of the rounds' ratios. One thread
# each, no bots sharing the cores: a finer reading of the workers' costs than
# bench/compare.sh's, whose runs of one build vary by a third here.
#
#   bench/tick-compare.sh /path/to/old/tick-bench            # 300 players, 600 ticks, 20 rounds
#   ROUNDS=10 bench/tick-compare.sh OLD 300 600 0 0          # tick-bench's own arguments after OLD
#
# A build of an earlier commit's tick-bench with this one's arguments: `git worktree add
# /tmp/old COMMIT`, copy bench/src/tick_bench.rs over, then `cd /tmp/old && cargo build
# --release -p expel-bench --bin tick-bench` (/tmp/old/target/release/tick-bench).
set -euo pipefail
cd "$(dirname "$0")/.."
old=${1:?usage: bench/tick-compare.sh OLD_TICK_BENCH [PLAYERS TICKS CHURN BUDGET]}
shift
args=("$@")
[ ${#args[@]} -gt 0 ] || args=(300 600)
rounds=${ROUNDS:-20}
cargo build --release -p expel-bench --bin tick-bench >/dev/null
new=target/release/tick-bench
rows=$(mktemp)
trap 'rm -f "$rows"' EXIT
for r in $(seq "$rounds"); do
  for build in new old; do
    bin=$new
    [ "$build" = old ] && bin=$old
    "$bin" "${args[@]}" | awk -v b="$build" '
      /^snapshots:/ { snap = $4 } /^step:/ { step = $4 } /^payload:/ { bytes = $2 }
      END { print b, snap, step, bytes }' >>"$rows"
  done
done
python3 - "$rows" "${args[*]}" <<'PY'
import statistics, sys
runs = {"new": [], "old": []}
for line in open(sys.argv[1]):
    build, *v = line.split()
    runs[build].append([float(x) for x in v])
print(f"tick-bench {sys.argv[2]}: medians of {len(runs['new'])} alternated runs each")
print("| figure | this build | the other | ratio of medians | median of the rounds' ratios |")
print("|---|---:|---:|---:|---:|")
for i, name in enumerate(["µs per snapshot", "µs per player-tick (the step)", "payload B per snapshot"]):
    a = [r[i] for r in runs["new"]]
    b = [r[i] for r in runs["old"]]
    ratios = [x / y for x, y in zip(a, b) if y]
    x, y = statistics.median(a), statistics.median(b)
    print(f"| {name} | {x:.2f} | {y:.2f} | {x / y:.3f} | {statistics.median(ratios):.3f} |")
PY
