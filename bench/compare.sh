#!/usr/bin/env bash
# This build against another build's `expel` in one alternated run of bench/load.sh (not a
# CI test): for each N, ROUNDS runs of each build in turn (each build's server with its
# own bots: the two may speak different protocol versions), then the medians side by side
# and their ratios: CPU per player-second for the whole server, the machine's thread (the
# serial part), the workers and the I/O threads, CPU per datagram each way, datagrams a
# second each way per bot, players admitted and honest ones flagged.
#
#   bench/compare.sh /path/to/old/expel            # N = 300, two rounds, 30 s runs
#   ROUNDS=3 bench/compare.sh OLD 300 1000         # also at 1,000 asked (the admission limit here)
#   SERVER_CPUS=0,1 BOT_CPUS=0,1 SERVER_ARGS="--threads 2 --io-threads 2" bench/compare.sh OLD
#   TOGETHER=1 bench/compare.sh OLD                # both builds at once, each with its N bots
#
# TOGETHER=1 runs the two builds side by side on the same cores, each with its own crowd,
# rather than one after the other: a machine whose speed drifts (a shared host: the same
# build read 5.4 and 9.0 us per datagram in runs minutes apart) drifts for both alike,
# so each round's ratio holds where the figures themselves do not. Each server carries
# its N with the other's load beside it; the ratios, not the figures, are the result.
#
# A build of an earlier commit: `git worktree add /tmp/old COMMIT && cd /tmp/old &&
# cargo build --release --bin expel` (its binary is /tmp/old/target/release/expel).
set -euo pipefail
cd "$(dirname "$0")/.."
old=${1:?usage: bench/compare.sh OLD_EXPEL_BIN [N...]}
shift
counts=("$@")
[ ${#counts[@]} -gt 0 ] || counts=(300)
rounds=${ROUNDS:-2}
cargo build --release --bin expel >/dev/null
new=target/release/expel
rows=$(mktemp)
run() { # build bin n: one load.sh run's table row, named by build
  EXPEL_BIN=$2 OUT="$outs/$1" bench/load.sh "$3" 2>/dev/null | grep -E '^\| [0-9]' | sed "s/^/$1 /" || true
}
outs=$(mktemp -d)
trap 'rm -f "$rows"; rm -rf "$outs"' EXIT
for n in "${counts[@]}"; do
  for r in $(seq "$rounds"); do
    if [ "${TOGETHER:-0}" = 1 ]; then
      run new "$new" "$n" >"$outs/new.row" &
      a=$!
      run old "$old" "$n" >"$outs/old.row" &
      wait "$a" $!
      cat "$outs/new.row" "$outs/old.row" >>"$rows"
      echo "$n bots, round $r, together: $(cut -d'|' -f9,25-27 "$outs/new.row") against$(cut -d'|' -f9,25-27 "$outs/old.row")" >&2
    else
      for build in new old; do
        bin=$new
        [ "$build" = old ] && bin=$old
        run "$build" "$bin" "$n" >>"$rows"
        echo "$n bots, round $r, $build: $(tail -n 1 "$rows" | cut -d'|' -f9,25-27)" >&2
      done
    fi
  done
done
python3 - "$rows" <<'PY'
import statistics, sys
runs = {}
for line in open(sys.argv[1]):
    build, _, rest = line.partition(" ")
    p = [c.strip() for c in rest.split("|")]
    num = lambda i: float(p[i]) if i < len(p) and p[i] not in ("", "n/a") else float("nan")
    runs.setdefault((int(p[1]), build), []).append({
        "admitted": num(2), "whole": num(8), "per datagram us": num(9),
        "datagrams down": num(12), "datagrams up": num(15), "honest flagged": num(17),
        "machine": num(24), "workers": num(25), "I/O": num(26),
        "I/O us per datagram received": num(28), "I/O us per datagram sent": num(29),
        "I/O other": num(30),
    })
keys = ["admitted", "whole", "machine", "workers", "I/O", "I/O us per datagram received",
        "I/O us per datagram sent", "I/O other", "per datagram us", "datagrams up",
        "datagrams down", "honest flagged"]
print("CPU in ms per player-second while every bot was on (the machine's thread is the serial part); medians of each build's runs")
print("| bots asked | figure | this build | the other | ratio of medians | median of rounds' ratios |")
print("|---:|---|---:|---:|---:|---:|")
for n in sorted({n for n, _ in runs}):
    a, b = runs.get((n, "new"), []), runs.get((n, "old"), [])
    for k in keys:
        med = lambda rs: statistics.median(r[k] for r in rs) if rs else float("nan")
        x, y = med(a), med(b)
        ratio = f"{x / y:.2f}" if y else "n/a"
        # Each round's two runs side by side (the same round: alike in the machine's state).
        paired = [r[k] / q[k] for r, q in zip(a, b) if q[k]]
        paired = [v for v in paired if v == v]
        rounds = f"{statistics.median(paired):.2f}" if paired else "n/a"
        print(f"| {n} | {k} | {x:.3f} ({len(a)} runs) | {y:.3f} ({len(b)} runs) | {ratio} | {rounds} |")
    for build, rs in (("this build", a), ("the other", b)):
        whole = [r["whole"] for r in rs]
        serial = [r["machine"] / r["whole"] for r in rs if r["whole"]]
        print(f"{n}: {build}: whole per run {', '.join(f'{w:.2f}' for w in whole)}; serial share "
              f"{', '.join(f'{100 * s:.1f}%' for s in serial)}")
PY
