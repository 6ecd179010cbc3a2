#!/usr/bin/env bash
# Recordings' figures (not a CI test): `expel serve --mode deathmatch --record` with a
# crowd of predicting, firing `expel bots` (one cheater of each kind), then `expel replay`
# of what it recorded. Prints the recording's size (bytes per player-minute) and the
# replay's summary (every hash equal, the violations counted again, its speed).
#
#   bench/record.sh                 # 64 bots for 600 s (the issue's 10-minute match)
#   BOTS=32 SECONDS_PER_RUN=60 bench/record.sh
#   WALLHACK=1 bench/record.sh      # 32 bots, a wallshot cheater alone, at 80, 150 and
#                                   # 300 ms round trips with 5% loss: when it was flagged
#                                   # and kicked, and honest players flagged
#   HONEST=1 WALLHACK=1 bench/record.sh   # the same crowd with nobody cheating
#   KEEP=/tmp/runs bench/record.sh  # keep the recordings (then `expel replay F --entries`)
set -euo pipefail
cd "$(dirname "$0")/.."
bots="${BOTS:-64}"
secs="${SECONDS_PER_RUN:-600}"
bin="${EXPEL_BIN:-target/release/expel}"
[ -n "${EXPEL_BIN:-}" ] || cargo build --release -q -p expel-cli
# KEEP=DIR keeps the runs (recordings, logs, reports) there.
if [ -n "${KEEP:-}" ]; then
  out="$KEEP"; mkdir -p "$out"
else
  out="$(mktemp -d)"
  trap 'rm -rf "$out"' EXIT
fi
port=47100

# Runs the server and the bots: $1 one-way delay (ms), $2 the cheats, $3 bots, $4 seconds.
run() {
  local dir="$out/run-$port"
  mkdir -p "$dir/rec"
  RUST_LOG=expel_server=info "$bin" serve --mode deathmatch --record "$dir/rec" \
    --secret bench-secret --addr "127.0.0.1:$port" --max-players 128 \
    >"$dir/serve.json" 2>"$dir/serve.log" &
  local server=$!
  for _ in $(seq 50); do [ -s "$dir/serve.json" ] && break; sleep 0.1; done
  local fp
  fp="$(python3 -c "import json,sys;print(json.load(open(sys.argv[1]))['fingerprint'])" "$dir/serve.json")"
  # shellcheck disable=SC2086
  "$bin" bots --server "127.0.0.1:$port" --secret bench-secret --fingerprint "$fp" \
    --count "$3" --duration "$4" --fire $2 --loss 0.05 --delay "$1" --jitter 5 \
    --report "$dir/bots.json" >/dev/null 2>"$dir/bots.log"
  curl -s "127.0.0.1:$port/metrics" | grep -E "^expel_shots(_behind_walls|_unseen)?_total" \
    >"$dir/shots.txt" || true
  kill -INT "$server"; wait "$server" || true
  "$bin" replay "$dir"/rec/*.rec >"$dir/replay.json"
  "$bin" replay "$dir"/rec/*.rec --entries >"$dir/entries.json"
  RUN_DIR="$dir" BOTS_N="$3" python3 - <<'PY'
import json, os, glob, re, datetime
d = os.environ["RUN_DIR"]; n = int(os.environ["BOTS_N"])
r = json.load(open(d + "/replay.json")); b = json.load(open(d + "/bots.json"))
size = sum(os.path.getsize(f) for f in glob.glob(d + "/rec/*.rec*"))
minutes = r["ticks"] / 60.0 / 60.0
kinds = {}
for v in r["violations"]:
    kinds[v["kind"]] = kinds.get(v["kind"], 0) + 1
print(f"recording: {size} bytes, {n} players, {minutes:.2f} min: "
      f"{size / n / minutes / 1000:.1f} KB per player-minute")
print(f"replay: {r['ticks']} ticks, hashes equal {r['hashes_checked']} "
      f"({r['full_hashes_checked']} whole), all_equal {r['all_equal']}, "
      f"{r['seconds']:.2f} s = {r['speed']:.0f}x real time; violations {kinds}")
e = json.load(open(d + "/entries.json"))
parts = ", ".join(f"{k} {v['bytes'] * 100 / e['inflated_bytes']:.0f}%" for k, v in e["entries"].items()
                  if v["bytes"] * 100 >= e["inflated_bytes"])
print(f"entries before deflating ({e['inflated_bytes']} bytes, deflated to {e['file_bytes']}): {parts}")
m = dict(l.split() for l in open(d + "/shots.txt").read().splitlines() if l.strip())
judged = float(m.get("expel_shots_total", 0))
behind = float(m.get("expel_shots_behind_walls_total", 0))
if judged:
    print(f"shots judged {judged:.0f}: aimed at players behind walls {behind:.0f} "
          f"({behind * 100 / judged:.2f}%), through players never shown "
          f"{float(m.get('expel_shots_unseen_total', 0)):.0f}")
print(f"bots: honest flagged {b['honest_flagged']}, cheaters {b['cheaters']}, kicked {b['kicked']}")
# When each flagged player joined, was first flagged and left (the server's log).
stamp = lambda l: datetime.datetime.fromisoformat(l.split()[0].rstrip("Z"))
lines = open(d + "/serve.log").read().splitlines()
for p in sorted({v["player"] for v in r["violations"]}):
    mine = [l for l in lines if f"player={p} " in l]
    joined = next((stamp(l) for l in mine if " joined" in l), None)
    flag = next((stamp(l) for l in mine if "violation" in l), None)
    left = next((stamp(l) for l in mine if " left" in l), None)
    if joined and flag:
        kick = f"{(left - joined).total_seconds():.1f}" if left else "-"
        print(f"  player {p}: flagged {(flag - joined).total_seconds():.1f} s after joining, "
              f"left after {kick} s")
PY
  port=$((port + 1))
}

if [ "${WALLHACK:-0}" = 1 ]; then
  cheat="--cheat wallshot"
  [ "${HONEST:-0}" = 1 ] && cheat=""
  for delay in 40 75 150; do
    echo "== ${BOTS:-32} bots, round trip $((2 * delay)) ms, 5% loss: ${cheat:-honest}"
    run "$delay" "$cheat" "${BOTS:-32}" "${SECONDS_PER_RUN:-30}"
  done
else
  echo "== $bots bots for $secs s, one cheater of each kind"
  run 20 "--cheat noclip,teleport,speed,fly,timing,backtrack,wallshot,rapidfire,gaps" "$bots" "$secs"
fi
