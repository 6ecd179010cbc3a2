#!/usr/bin/env bash
# The long versions of what the suite runs briefly, on the suite's own builds (run the
# README's test command first, or this compiles them): half a minute of clean-link play
# on every shipped map, a minute's soak of a hundred bots, half a million random movement
# ticks per map against the oracle, ten minutes of 64 clients on the simulated network.
# Not part of CI, which keeps to the suite and its checks within its time; each
# knob may be set higher:
#
#   tests/long.sh
#   EXPEL_SOAK_SECONDS=3600 SIMNET_SECS=3600 tests/long.sh
set -euo pipefail
cd "$(dirname "$0")/.."
suite=(cargo test --workspace --exclude expel-bench)
EXPEL_CLEAN_SECONDS=${EXPEL_CLEAN_SECONDS:-30} "${suite[@]}" --test cli a_lone_client_on_a_clean_link
EXPEL_SOAK_SECONDS=${EXPEL_SOAK_SECONDS:-60} "${suite[@]}" --test abuse a_hundred_bots
EXPEL_RANDOM_TICKS=${EXPEL_RANDOM_TICKS:-500000} "${suite[@]}" --test movement_random
SIMNET_SECS=${SIMNET_SECS:-600} "${suite[@]}" --test simnet sixty_four_clients
