#!/usr/bin/env bash
# Deathmatch's bytes (not a CI test): `expel serve --mode deathmatch` on its default
# settings with a crowd of predicting, firing `expel bots` on this machine's loopback, then
# the figures issue 71 asks of it: bytes down a second per bot (all of QUIC, and of it the
# protocol's payload), datagrams each way, snapshots a second, hits confirmed of those the
# shooters saw, unexplained corrections, and the server's tick.
#
#   bench/deathmatch.sh                    # 200 bots for 20 s
#   BOTS=100 SECONDS_PER_RUN=60 bench/deathmatch.sh
#   SERVER_ARGS="--client-budget 2048" bench/deathmatch.sh   # more flags for expel serve
#   EXPEL_BIN=/path/to/expel bench/deathmatch.sh             # another build (no cargo)
#   KEEP=/tmp/run bench/deathmatch.sh                        # keep the run's files
set -euo pipefail
cd "$(dirname "$0")/.."
bots="${BOTS:-200}"
secs="${SECONDS_PER_RUN:-20}"
bin="${EXPEL_BIN:-target/release/expel}"
[ -n "${EXPEL_BIN:-}" ] || cargo build --release -q -p expel-cli
# KEEP=DIR keeps the run's files (the server's log, the bots' report and log) there.
out="${KEEP:-$(mktemp -d)}"
mkdir -p "$out"
server=""
trap '[ -n "$server" ] && kill "$server" 2>/dev/null; [ -n "${KEEP:-}" ] || rm -rf "$out"' EXIT
# shellcheck disable=SC2086
"$bin" serve --mode deathmatch --secret bench-secret --addr 127.0.0.1:0 \
  --max-players $((bots + 16)) ${SERVER_ARGS:-} >"$out/serve.json" 2>"$out/serve.log" &
server=$!
for _ in $(seq 100); do [ -s "$out/serve.json" ] && break; sleep 0.1; done
read -r addr fp < <(python3 -c "import json,sys;d=json.load(open(sys.argv[1]));print(d['listening'],d['fingerprint'])" "$out/serve.json")
"$bin" bots --server "$addr" --secret bench-secret --fingerprint "$fp" --count "$bots" \
  --duration "$secs" --fire --report "$out/bots.json" >/dev/null 2>"$out/bots.log"
curl -s "http://$addr/metrics" >"$out/metrics.txt" || true
python3 - "$out/bots.json" "$bots" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
seen, confirmed = r["hits_seen"], r["hits_confirmed"]
share = f"{confirmed * 100 / seen:.2f}%" if seen else "n/a"
print(f"{sys.argv[2]} bots ({r['connected']} joined): down {r['down_bytes_per_s']:.0f} B/s per bot "
      f"(payload {r['down_payload_bytes_per_s']:.0f}), up {r['up_bytes_per_s']:.0f} B/s; "
      f"datagrams down {r['down_datagrams_per_s']:.1f} / up {r['up_datagrams_per_s']:.1f}; "
      f"snapshots {r['snapshots_per_s']:.1f}/s; hits confirmed {confirmed} of {seen} seen ({share}); "
      f"unexplained corrections {r['unexplained_corrections']}; honest flagged {r['honest_flagged']}; "
      f"tick p99 {r['server_tick_ms_p99']} ms")
PY
