#!/usr/bin/env bash
# Load benchmark (not a CI test): `expel serve` and `expel bots --light` in separate
# processes on this machine, pinned to separate cores with taskset, 60 Hz tick, 30 Hz
# snapshots, the embedded arena, an honest mixed crowd of light bots (no prediction, so
# the bots cost far less than the server they load). For each N it writes
# bench/results/load-N.json (the bots' report) and load-N.svg (the chart), then prints a
# table and the largest N whose server tick p99 stayed under the tick period (16.7 ms)
# with no disconnects.
#
#   bench/load.sh                          # N = 250 500 1000 2000, 30 s each
#   SECONDS_PER_RUN=60 bench/load.sh 100 2000
#   SERVER_CPUS=0,1 BOT_CPUS=0,1 bench/load.sh 1000   # the server on both cores (bots share them)
#   PROFILE=1 bench/load.sh 1000           # also a perf profile of the server (needs perf)
#   FULL_BOTS=1 bench/load.sh 200          # bots that predict, as a game client does
#   SERVER_BIN=/path/to/old/expel bench/load.sh 1000   # another build's server, same bots
#   INPUT_RATE=60 bench/load.sh 1000       # clients send inputs every tick (default 30 a second)
#   SERVER_ARGS="--threads 1" bench/load.sh 1000   # more flags for expel serve
#   NOISE=1 bench/load.sh 1000             # a busy process shares the server's core(s)
#   EXPEL_BIN=/path/to/expel bench/load.sh 1000     # a built binary alone (no cargo)
#   OUT=/tmp/a bench/load.sh 300           # results elsewhere than bench/results
#   SERVER_CPUS=0-3 BOT_CPUS=4-11 BOT_PROCS=8 bench/load.sh 8000   # bots in 8 processes,
#                                          # each pinned to one of BOT_CPUS in turn
#   BOT_PROCS=auto ...                     # a process per thousand bots
#   (bench/many-cores.sh runs the many-core table with these)
set -euo pipefail
cd "$(dirname "$0")/.."

counts=("$@")
[ ${#counts[@]} -gt 0 ] || counts=(250 500 1000 2000)
secs=${SECONDS_PER_RUN:-30}
server_cpus=${SERVER_CPUS:-0}
bot_cpus=${BOT_CPUS:-1}
# OUT: where the results go (two runs at once need a folder each).
out=${OUT:-bench/results}
mkdir -p "$out"
if [ -n "${EXPEL_BIN:-}" ]; then
  bin=$EXPEL_BIN
else
  cargo build --release --bin expel >/dev/null
  bin=target/release/expel
fi
# SERVER_BIN: another build's server against these bots (a before/after comparison).
server_bin=${SERVER_BIN:-$bin}
secret=load-bench-secret
light=(--light)
serve_extra=()
[ -n "${INPUT_RATE:-}" ] && serve_extra=(--input-rate "$INPUT_RATE")
# SERVER_ARGS: more flags for `expel serve`, split on spaces.
# shellcheck disable=SC2206
serve_extra+=(${SERVER_ARGS:-})
[ "${FULL_BOTS:-0}" = 1 ] && light=()
# Pinning (taskset execs the command, so $! is the server itself, for perf).
pin_server=() pin_bots=()
if command -v taskset >/dev/null 2>&1; then
  pin_server=(taskset -c "$server_cpus") pin_bots=(taskset -c "$bot_cpus")
fi
# BOT_CPUS as a list of single CPUs ("1-3,6": 1 2 3 6), one per bot process in turn.
bot_cpu_list=()
IFS=, read -ra parts <<<"$bot_cpus"
for part in "${parts[@]}"; do
  for c in $(seq "${part%-*}" "${part#*-}"); do bot_cpu_list+=("$c"); done
done

# NOISE=1: a neighbour that wants the server's whole core (CFS gives it about half).
noise=""
if [ "${NOISE:-0}" = 1 ]; then
  "${pin_server[@]}" sh -c 'while :; do :; done' &
  noise=$!
fi
# Each server thread's run time (ns, the kernel's schedstat) by name, and the players in.
thread_cpu() {
  local m
  m=$(curl -s "http://$2/metrics" 2>/dev/null || true)
  awk '/^expel_players /{print "players", $2} /^expel_inputs_applied_total /{print "applied", $2} /^expel_inputs_missing_total /{print "missing", $2}
    /^expel_udp_datagrams_total /{print "udp received", $2} /^expel_udp_sent_total /{print "udp sent", $2}
    /^expel_io_cpu_seconds_total\{work="[a-z]*"\} /{split($1, w, "\""); printf "io %s %.0f\n", w[2], $2 * 1e9}' <<<"$m"
  for t in /proc/"$1"/task/*; do
    echo "$(cat "$t/comm" 2>/dev/null) $(cut -d' ' -f1 "$t/schedstat" 2>/dev/null)"
  done
}
# From two thread_cpu readings SECS apart, CPU ms per player-second by thread kind: the
# machine's thread (the serial part), the I/O threads together, the busiest of them, the
# tick's workers together; then the share of commands in time.
thread_share() {
  python3 - "$1" "$2" "$3" <<'PY'
import sys
def read(path):
    d = {}
    for line in open(path):
        name, _, v = line.rpartition(" ")
        if v.strip():
            d[name.strip()] = d.get(name.strip(), 0) + int(float(v))
    return d
a, b, secs = read(sys.argv[1]), read(sys.argv[2]), float(sys.argv[3])
players = max(b.get("players", 0), 1)
ms = lambda k: (b.get(k, 0) - a.get(k, 0)) / 1e6 / secs / players
# Without workers (--threads 1) the machine's thread does all of a tick's work.
print(f"{ms('expel-machine'):.3f}")
io = [ms(k) for k in b if k.startswith("expel-io")]
print(f"{sum(io):.3f}" if io else "n/a")
print(f"{max(io):.3f}" if io else "n/a")
workers = [ms(k) for k in b if k.startswith("expel-step")]
print(f"{sum(workers):.3f}" if workers else "0")
# The share of commands in time over the same third: the crowd in, its joins done.
applied, missing = (b.get(k, 0) - a.get(k, 0) for k in ("applied", "missing"))
print("n/a" if applied + missing <= 0 else f"{100 * applied / (applied + missing):.3f}%")
# Each thread on its own (an older build ran the machine's loop on one of the workers).
names = sorted(k for k in b if k.startswith("expel-"))
print(", ".join(f"{k} {ms(k):.3f}" for k in names))
# The I/O threads' CPU per datagram each way, from the server's own account
# (expel_io_cpu_seconds over its sockets' datagrams; n/a from a build without it).
def per_datagram(work, count):
    n = b.get(count, 0) - a.get(count, 0)
    t = b.get(f"io {work}", 0) - a.get(f"io {work}", 0)
    return f"{t / 1e3 / n:.2f}" if n > 0 and f"io {work}" in b else "n/a"
print(per_datagram("receive", "udp received"))
print(per_datagram("send", "udp sent"))
print(f"{ms('io other'):.3f}" if "io other" in b else "n/a")
PY
}
rows=()
threads_each=()
inputs=()
short=()
refusals=()
best=0
best_cpu=n/a
server=""
# A run cut short (Ctrl-C, timeout) must not leave its server running.
trap '{ [ -n "$server" ] && kill "$server"; } 2>/dev/null || true; { [ -n "$noise" ] && kill "$noise"; } 2>/dev/null || true' EXIT
for n in "${counts[@]}"; do
  log="$out/serve-$n.log"
  # Refusals are logged at info, with their cause (summed up after the table).
  RUST_LOG=${RUST_LOG:-info} "${pin_server[@]}" "$server_bin" serve --addr 127.0.0.1:0 --secret "$secret" --max-players $((n + 16)) "${serve_extra[@]}" \
    >"$out/serve-$n.ready" 2>"$log" &
  server=$!
  for _ in $(seq 100); do [ -s "$out/serve-$n.ready" ] && break; sleep 0.1; done
  ready=$(head -n 1 "$out/serve-$n.ready")
  addr=$(sed 's/.*"listening":"\([^"]*\)".*/\1/' <<<"$ready")
  fp=$(sed 's/.*"fingerprint":"\([0-9a-f]*\)".*/\1/' <<<"$ready")
  prof=""
  if [ "${PROFILE:-0}" = 1 ]; then
    # Profile the middle of the run, once every bot has joined.
    (sleep $((secs / 3)) && perf record -e cpu-clock -F 499 --call-graph dwarf,16384 -p "$server" -o "$out/perf-$n.data" -- sleep $((secs / 3)) >/dev/null 2>&1) &
    prof=$!
  fi
  # Each kind of server thread (the machine's, the workers, the I/O threads), over the
  # middle third of the run: CPU ms per player-second from the kernel's counts.
  threads=$(mktemp -d)
  (sleep $((secs / 3)) && thread_cpu "$server" "$addr" >"$threads/a" && sleep $((secs / 3)) &&
    thread_cpu "$server" "$addr" >"$threads/b" && thread_share "$threads/a" "$threads/b" $((secs / 3)) >"$threads/share") &
  sampler=$!
  # BOT_PROCS processes share the N bots, each with its own player ids and pinned to the
  # next of BOT_CPUS; their reports merge into one. They share the 64 handshakes in flight
  # that the server allows one address (they all come from loopback).
  procs=${BOT_PROCS:-1}
  [ "$procs" = auto ] && procs=$(((n + 999) / 1000))
  bots=()
  rm -f "$out"/load-"$n"-p*.json "$out"/bots-"$n"-p*.txt
  for k in $(seq 0 $((procs - 1))); do
    count=$((n / procs + (k < n % procs ? 1 : 0)))
    pin=("${pin_bots[@]}")
    [ "$procs" -gt 1 ] && [ ${#pin_bots[@]} -gt 0 ] && pin=(taskset -c "${bot_cpu_list[$((k % ${#bot_cpu_list[@]}))]}")
    chart=()
    [ "$k" = 0 ] && chart=(--chart "$out/load-$n.svg")
    "${pin[@]}" "$bin" bots --server "$addr" --secret "$secret" --fingerprint "$fp" --count "$count" \
      --first-player $((1 + k * 1000000)) --duration "$secs" --behavior mixed \
      --concurrent-connects $(((64 + procs - 1) / procs)) \
      "${light[@]}" --report "$out/load-$n-p$k.json" "${chart[@]}" >"$out/bots-$n-p$k.txt" &
    bots+=($!)
  done
  for b in "${bots[@]}"; do wait "$b" || true; done
  python3 - "$out/load-$n.json" "$out"/load-"$n"-p*.json <<'MERGE'
import json, sys
rs = [json.load(open(f)) for f in sys.argv[2:]]
m = dict(rs[0])  # the server's figures: every process scraped the same server
summed = ["connected", "failed", "refused_for_load", "disconnected", "kicked", "cheats_attempted",
          "cheaters_detected", "honest_flagged", "unexplained_corrections", "reconnects"]
for k in summed:
    m[k] = sum(r.get(k, 0) for r in rs)
on = sum(r["connected"] for r in rs) or 1
for k in ["rtt_ms_p50", "snapshots_per_s", "down_bytes_per_s", "up_bytes_per_s", "down_datagrams_per_s",
          "up_datagrams_per_s", "down_payload_bytes_per_s", "corrections_per_min_honest"]:
    m[k] = sum(r[k] * r["connected"] for r in rs) / on
m["rtt_ms_p99"] = max(r["rtt_ms_p99"] for r in rs)
m["errors"] = sorted({e for r in rs for e in r["errors"]})[:8]
json.dump(m, open(sys.argv[1], "w"), indent=1)
MERGE
  cat "$out"/bots-"$n"-p*.txt >"$out/bots-$n.txt"
  [ -n "$prof" ] && wait "$prof"
  wait "$sampler" 2>/dev/null || true
  machine_ms=$(sed -n 1p "$threads/share" 2>/dev/null || true)
  io_ms=$(sed -n 2p "$threads/share" 2>/dev/null || true)
  io_max_ms=$(sed -n 3p "$threads/share" 2>/dev/null || true)
  workers_ms=$(sed -n 4p "$threads/share" 2>/dev/null || true)
  steady_in_time=$(sed -n 5p "$threads/share" 2>/dev/null || true)
  each_thread=$(sed -n 6p "$threads/share" 2>/dev/null || true)
  io_in_us=$(sed -n 7p "$threads/share" 2>/dev/null || true)
  io_out_us=$(sed -n 8p "$threads/share" 2>/dev/null || true)
  io_other_ms=$(sed -n 9p "$threads/share" 2>/dev/null || true)
  [ -n "$each_thread" ] && threads_each+=("$n: CPU ms per player-second by thread: $each_thread")
  rm -rf "$threads"
  # The server's own account of its lateness, before it goes.
  metrics=$(curl -s "http://$addr/metrics" 2>/dev/null || true)
  late=$(awk '/^expel_ticks_late_total /{print $2}' <<<"$metrics")
  applied=$(awk '/^expel_inputs_applied_total /{print $2}' <<<"$metrics")
  missing=$(awk '/^expel_inputs_missing_total /{print $2}' <<<"$metrics")
  skipped=$(awk '/^expel_ticks_skipped_total /{print $2}' <<<"$metrics")
  inputs_late=$(awk '/^expel_inputs_late_total /{print $2}' <<<"$metrics")
  backlogs=$(awk '/^expel_udp_backlogs_total /{print $2}' <<<"$metrics")
  drops=$(awk '/^expel_udp_drops_total /{print $2}' <<<"$metrics")
  inputs+=("$n: commands the server lacked on their tick ${missing:-n/a}, of them arriving late ${inputs_late:-n/a}; datagrams its sockets dropped ${drops:-n/a}; looks at them that left a backlog ${backlogs:-n/a}")
  kill -TERM "$server" && wait "$server" || true
  row=$(python3 - "$out/load-$n.json" "$n" "${INPUT_RATE:-30}" "${late:-n/a}" "${skipped:-n/a}" "${applied:-0}" "${missing:-0}" "${machine_ms:-n/a}" "${io_ms:-n/a}" "${steady_in_time:-n/a}" "${io_max_ms:-n/a}" "${workers_ms:-n/a}" "${io_in_us:-n/a}" "${io_out_us:-n/a}" "${io_other_ms:-n/a}" <<'EOF'
import json, sys
r = json.load(open(sys.argv[1])); n = int(sys.argv[2]); rate = float(sys.argv[3])
late, skipped = sys.argv[4], sys.argv[5]
applied, missing = float(sys.argv[6]), float(sys.argv[7])
machine_ms, io_ms, steady_in_time = sys.argv[8], sys.argv[9], sys.argv[10]
io_max_ms, workers_ms = sys.argv[11], sys.argv[12]
io_in_us, io_out_us, io_other_ms = sys.argv[13], sys.argv[14], sys.argv[15]
# Of the ticks the server had a player's command for or lacked one: the share in time.
in_time = "n/a" if applied + missing == 0 else f"{100 * applied / (applied + missing):.3f}%"
f = lambda v: "n/a" if v is None else f"{v:.2f}"
cpu = r['server_cpu_percent']
# CPU per player-second over the whole run (joins and the idle tail included), a share of
# one core over the players; and while every player was on (the steady cost).
per = None if cpu is None or r['connected'] == 0 else cpu / 100 * 1000 / r['connected']
steady = r.get('server_cpu_ms_per_player_s')
lost = r['disconnected'] + r['failed']
# QUIC's own bytes per datagram down: headers, tags, acknowledgements, and packets that
# carry nothing else.
dg = r['down_datagrams_per_s']
quic = None if dg == 0 else (r['down_bytes_per_s'] - r['down_payload_bytes_per_s']) / dg
# The steady CPU over every datagram a player moves each way: the bots' own core decides
# how many inputs they send (fewer once it is full), so runs compare better per datagram.
moved = dg + r['up_datagrams_per_s']
per_dg = None if steady is None or moved == 0 else steady * 1000 / moved
print(f"| {n} | {r['connected']} | {f(r['server_tick_ms_p50'])} | {f(r['server_tick_ms_p99'])} | "
      f"{f(r['server_tick_ms_max'])} | {f(cpu)} | {f(per)} | {f(steady)} | {f(per_dg)} | {r['down_bytes_per_s']:.0f} | "
      f"{r['down_payload_bytes_per_s']:.0f} | {dg:.1f} | {f(quic)} | "
      f"{r['up_bytes_per_s']:.0f} | {r['up_datagrams_per_s']:.1f} | {lost} | {r['honest_flagged']} | "
      f"{r['snapshots_per_s']:.1f} | {r['refused_for_load']} | {late} | {skipped} | {in_time} | {steady_in_time} | "
      f"{machine_ms} | {workers_ms} | {io_ms} | {io_max_ms} | {io_in_us} | {io_out_us} | {io_other_ms} |")
# The steady CPU, for the estimate of where the server's cores run out.
print("n/a" if steady is None else f"{steady:.4f}")
# Bots whose core is full send fewer inputs than asked: the row then measures a lighter
# load than a crowd of N gives, and does not count for the largest N.
kept_up = r['up_datagrams_per_s'] >= 0.9 * rate
ok = (r['server_tick_ms_p99'] or 1e9) < 1000 / 60 and lost == 0 and kept_up
print("OK" if ok else "OVER" if kept_up else f"SHORT {r['up_datagrams_per_s']:.1f}")
EOF
)
  rows+=("$(head -n 1 <<<"$row")")
  # Why joins were refused for load: the server's own words, by cause (what held its
  # capacity down: late ticks, socket drops, a busy thread, or the players' estimated cost).
  causes=$(grep "server full for its load" "$log" 2>/dev/null | sed -E 's/.*players now \(([^;]*);.*/\1/' |
    sed -E 's/^[0-9]+ of [0-9]+ ticks ran late$/ticks ran late/; s/^the socket dropped [0-9]+ datagrams$/the socket dropped datagrams/; s/^its thread works [0-9]+% of the time.*/its thread was busy/' |
    sort | uniq -c | sort -rn | awk '{n=$1; $1=""; printf "%s%s:%s", (NR>1?",":""), $0, " " n}' || true)
  [ -n "$causes" ] && refusals+=("$n: joins refused for load because$causes")
  verdict=$(tail -n 1 <<<"$row")
  if [ "$verdict" = OK ] && [ "$n" -gt "$best" ]; then
    best=$n
    best_cpu=$(sed -n 2p <<<"$row")
  fi
  if [ "${verdict%% *}" = SHORT ]; then
    short+=("$n: the bots sent ${verdict#SHORT } datagrams a second each, under 90% of the ${INPUT_RATE:-30} inputs asked (their core was full): a lighter load than $n players give")
  fi
done

echo "server on CPUs $server_cpus$([ -n "$noise" ] && echo " (shared with a busy process)"), bots on CPUs $bot_cpus, ${secs} s per run, $([ ${#light[@]} -gt 0 ] && echo light || echo predicting) bots, inputs at ${INPUT_RATE:-30} Hz"
echo "| bots | connected | tick p50 ms | tick p99 ms | tick max ms | server CPU % | server CPU ms per player-s (whole run) | the same, everyone on | server CPU us per datagram each way | down B/s per bot | of it snapshots B/s | datagrams/s down | QUIC B per datagram down | up B/s per bot | datagrams/s up | disconnects + failures | honest flagged | snapshots/s per bot | refused for load | ticks late | ticks skipped | inputs in time | the same, middle third | machine thread CPU ms per player-s (serial part) | workers' | I/O threads' | busiest I/O thread's | I/O us per datagram received | I/O us per datagram sent | I/O threads' other work, ms per player-s |"
echo "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
printf '%s\n' "${rows[@]}"
echo
printf '%s\n' "${inputs[@]}"
[ ${#threads_each[@]} -gt 0 ] && printf '%s\n' "${threads_each[@]}"
[ ${#short[@]} -gt 0 ] && printf '%s\n' "${short[@]}"
[ ${#refusals[@]} -gt 0 ] && printf '%s\n' "${refusals[@]}"
echo "largest N with tick p99 under the 16.7 ms tick period, no disconnects and bots that kept up: $best"
# Past the N the bots here can drive (about 1,000 from one core), the server's own CPU per
# player says where its cores run out: the tick falls behind once they are full.
if [ "$best" -gt 0 ] && [ "$best_cpu" != n/a ] && [ ${#pin_server[@]} -gt 0 ]; then
  python3 - "$best_cpu" "$server_cpus" "$bot_cpus" "$best" <<'PY'
import sys
c, server, bots, n = float(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4]
def cpus(spec):  # a taskset list: "0", "0,1", "0-3,6"
    out = set()
    for part in spec.split(","):
        a, _, b = part.partition("-")
        out |= set(range(int(a), int(b or a) + 1))
    return out
mine = cpus(server)
if mine & cpus(bots):
    print("(no estimate of where the server's cores run out: the bots share them)")
else:
    k = len(mine)
    print(f"the server cost {c:.2f} ms of CPU per player-second at N = {n}: its {k} core(s) are full at about "
          f"{int(k * 1000 / c)} players (an estimate, not a measured row: the tick falls behind once they are full)")
PY
fi
