#!/usr/bin/env bash
# Load benchmark (not a CI test): `expel serve` and `expel bots` in separate processes on
# this machine, 60 Hz tick, 30 Hz snapshots, the embedded arena, a mixed honest crowd.
# For each N it writes bench/results/load-N.json (the bots' report) and load-N.svg (the
# chart), then prints a table and the largest N whose server tick p99 stayed under 5 ms
# with no disconnects.
#
#   bench/load.sh                 # N = 100 250 500 1000, 30 s each
#   SECONDS_PER_RUN=60 bench/load.sh 100 2000
#   PROFILE=1 bench/load.sh 1000  # also a perf profile of the server (needs perf)
set -euo pipefail
cd "$(dirname "$0")/.."

counts=("$@")
[ ${#counts[@]} -gt 0 ] || counts=(100 250 500 1000)
secs=${SECONDS_PER_RUN:-30}
out=bench/results
mkdir -p "$out"
cargo build --release --bin expel >/dev/null
bin=target/release/expel
secret=load-bench-secret

rows=()
best=0
for n in "${counts[@]}"; do
  log="$out/serve-$n.log"
  "$bin" serve --addr 127.0.0.1:0 --secret "$secret" --max-players $((n + 16)) \
    >"$out/serve-$n.ready" 2>"$log" &
  server=$!
  for _ in $(seq 100); do [ -s "$out/serve-$n.ready" ] && break; sleep 0.1; done
  ready=$(head -n 1 "$out/serve-$n.ready")
  addr=$(sed 's/.*"listening":"\([^"]*\)".*/\1/' <<<"$ready")
  fp=$(sed 's/.*"fingerprint":"\([0-9a-f]*\)".*/\1/' <<<"$ready")
  prof=""
  if [ "${PROFILE:-0}" = 1 ]; then
    # Profile the middle of the run, once every bot has joined.
    (sleep $((secs / 3)) && perf record -F 499 -g -p "$server" -o "$out/perf-$n.data" -- sleep $((secs / 3)) >/dev/null 2>&1) &
    prof=$!
  fi
  "$bin" bots --server "$addr" --secret "$secret" --fingerprint "$fp" --count "$n" \
    --duration "$secs" --behavior mixed --concurrent-connects 64 \
    --report "$out/load-$n.json" --chart "$out/load-$n.svg" >"$out/bots-$n.txt"
  [ -n "$prof" ] && wait "$prof"
  kill -TERM "$server" && wait "$server" || true
  row=$(python3 - "$out/load-$n.json" "$n" <<'EOF'
import json, sys
r = json.load(open(sys.argv[1])); n = int(sys.argv[2])
f = lambda v: "n/a" if v is None else f"{v:.2f}"
print(f"| {n} | {r['connected']} | {f(r['server_tick_ms_p50'])} | {f(r['server_tick_ms_p99'])} | "
      f"{f(r['server_tick_ms_max'])} | {f(r['server_cpu_percent'])} | {r['down_bytes_per_s']:.0f} | "
      f"{r['up_bytes_per_s']:.0f} | {r['disconnected'] + r['failed']} | {r['snapshots_per_s']:.1f} |")
ok = (r['server_tick_ms_p99'] or 1e9) < 5 and r['disconnected'] + r['failed'] == 0
print("OK" if ok else "OVER")
EOF
)
  rows+=("$(head -n 1 <<<"$row")")
  if [ "$(tail -n 1 <<<"$row")" = OK ] && [ "$n" -gt "$best" ]; then best=$n; fi
done

echo "| bots | connected | tick p50 ms | tick p99 ms | tick max ms | server CPU % | down B/s per bot | up B/s per bot | disconnects + failures | snapshots/s per bot |"
echo "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
printf '%s\n' "${rows[@]}"
echo
echo "largest N with tick p99 under 5 ms and no disconnects: $best"
