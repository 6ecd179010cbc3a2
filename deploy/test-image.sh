#!/usr/bin/env bash
# Runs the image (deploy/build-image.sh) as the Fleet runs it and checks it for real: not
# root, a read-only root with /tmp a tmpfs, on the host's network (loopback only); it
# serves a swarm of bots, answers /healthz, and on SIGTERM drains and exits 0 within the
# Fleet's grace period (30 s). BOTS is the expel binary that drives the bots (by default
# the static one build-image.sh made).
set -euo pipefail
cd "$(dirname "$0")/.."

engine="${CONTAINER_ENGINE:-$(command -v podman || command -v docker || true)}"
case "$engine" in *podman) export CONTAINERS_CONF="${CONTAINERS_CONF:-$PWD/deploy/containers.conf}" ;; esac
image="${IMAGE:-expel:local}"
target="$(rustc -vV | sed -n 's/^host: //p')"
bots="${BOTS:-target/$target/release/expel}"
grace=30
name="expel-test-$$"
secret="image-test-$$"
fail() { echo "test-image.sh: $*" >&2; "$engine" logs "$name" 2>&1 | tail -n 20 >&2 || true; exit 1; }
cleanup() { "$engine" rm -f "$name" >/dev/null 2>&1 || true; }
trap cleanup EXIT

"$engine" run -d --name "$name" --network host --read-only --tmpfs /tmp \
  -e EXPEL_SECRET="$secret" -e RUST_LOG=warn "$image" \
  serve /opt/expel/maps/arena.map --addr 127.0.0.1:0 --metrics 127.0.0.1:0 >/dev/null

# The ready line: where it listens, and its certificate's fingerprint.
ready=""
for _ in $(seq 1 150); do
  ready="$("$engine" logs "$name" 2>/dev/null | grep -m1 '"listening"' || true)"
  [ -n "$ready" ] && break
  sleep 0.2
done
[ -n "$ready" ] || fail "no ready line within 30 s"
addr="$(echo "$ready" | jq -r .listening)"
http="$(echo "$ready" | jq -r .metrics)"
fp="$(echo "$ready" | jq -r .fingerprint)"

# Not root: the process's user on the host, and the image's.
pid="$("$engine" inspect "$name" --format '{{.State.Pid}}')"
uid="$(awk '/^Uid:/ {print $2}' "/proc/$pid/status")"
[ "$uid" != 0 ] || fail "the server runs as root"
user="$("$engine" image inspect "$image" --format '{{.Config.User}}')"
echo "runs as uid $uid (image user $user), read-only root"

health="$(curl -fsS "http://$http/healthz")" || fail "/healthz did not answer"
echo "/healthz: $health"

# Bots play while SIGTERM comes: they are told the server is shutting down.
report="$(mktemp)"
"$bots" bots --server "$addr" --secret "$secret" --fingerprint "$fp" --count 16 \
  --duration 20 --report "$report" >/dev/null 2>&1 &
swarm=$!
sleep 8
players="$(curl -fsS "http://$http/metrics" | awk '$1 == "expel_clients" {print $2}')"
[ "$players" = 16 ] || fail "$players of 16 bots playing after 8 s"
echo "16 bots playing"

start="$(date +%s.%N)"
"$engine" kill --signal TERM "$name" >/dev/null
code="$(timeout "$grace" "$engine" wait "$name")" || fail "not stopped within $grace s of SIGTERM"
took="$(awk -v a="$start" -v b="$(date +%s.%N)" 'BEGIN { printf "%.2f", b - a }')"
[ "$code" = 0 ] || fail "exit status $code after SIGTERM"
wait "$swarm" || true
flagged="$(jq .honest_flagged "$report")"
ended="$(jq .disconnected "$report")"
kicked="$(jq .kicked "$report")"
rm -f "$report"
[ "$flagged" = 0 ] || fail "$flagged honest bots flagged"
[ "$ended" = 16 ] && [ "$kicked" = 0 ] || fail "$ended of 16 bots told of the end, $kicked kicked"
echo "SIGTERM: drained (all 16 bots told by the server, none kicked or flagged) and exited 0 in ${took} s"
size="$("$engine" image inspect "$image" --format '{{.Size}}')"
echo "image $image: $((size / 1024 / 1024)) MiB"
