#!/usr/bin/env bash
# The many-core load table (not a CI test): the server pinned to 1, 2, 4 and 8 cores
# (`--threads` and `--io-threads` the same), light bots in processes of a thousand, each
# pinned to a core of its own beside the server's, N = 1,000 to 8,000, through
# bench/load.sh. Wants 16 cores (the server on 0-7, the bots on 8-15); runs from a built
# binary alone, so it can run where there is no toolchain:
#
#   EXPEL_BIN=target/release/expel bench/many-cores.sh
#   SERVER_CORES="1 8" COUNTS="1000 8000" SECONDS_PER_RUN=30 bench/many-cores.sh
set -euo pipefail
cd "$(dirname "$0")/.."
here=$(nproc)
[ "$here" -ge 16 ] || echo "note: $here cores here; the table wants 16 (server 0-7, bots 8-15)" >&2
echo "machine: $here cores, $(uname -sr), $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//')"
for k in ${SERVER_CORES:-1 2 4 8}; do
  echo
  echo "## server on $k core(s): --threads $k --io-threads $k"
  # shellcheck disable=SC2086
  SERVER_CPUS=0-$((k - 1)) BOT_CPUS=${BOT_CPUS:-8-15} BOT_PROCS=auto \
    SERVER_ARGS="--threads $k --io-threads $k ${SERVER_ARGS:-}" \
    bench/load.sh ${COUNTS:-1000 2000 4000 8000}
done
