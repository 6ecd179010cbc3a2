#!/usr/bin/env python3
"""The server's time by category from a `perf` profile (bench/load.sh with PROFILE=1):

    python3 bench/profile.py bench/results/perf-1000.data

Each sample is charged to the first category that one of its frames matches, leaf first
(so a malloc called from the encoder counts as allocation, a sort inside the interest
selection as interest)."""
import re
import subprocess
import sys
from collections import Counter

# First match wins; leaf frames are tried first.
CATEGORIES = [
    ("allocation and copies", r"malloc|_int_free|\bfree\b|realloc|memmove|memcpy|unlink_chunk|cfree|alloc::raw_vec"),
    ("interest (nearest players)", r"Crowd::nearest|select_nth|quicksort|smallsort|partition|PlayerGrid::near.*snapshot"),
    # The server's own QUIC shell (server/src/quic/) and the shared driver (expel-quic) count
    # as QUIC, as quinn's did.
    ("QUIC (quinn, rustls, ring)", r"quinn|expel_server::quic::|expel_quic::|rustls|ring_core|ring::|aes_gcm|chacha|poly1305"),
    ("kernel (UDP, scheduling)", r"\[k\]|^(__|do_|entry_|sys_|udp|ip_|net_|sock|skb|tcp|ep_|schedule|futex)"),
    ("snapshot and input encoding", r"snapshot::|postcard|serde|frame_msg|Entities|protocol::frame|encode|decode"),
    ("simulation (pmove, traces, step)", r"sim::|pmove|collision::|SimCollider|boxsweep|mover::"),
    ("validation", r"validate::"),
    ("tokio and tracing", r"tokio|tracing|mio::|parking_lot|crossbeam|rayon"),
]


def main():
    data = sys.argv[1]
    out = subprocess.run(
        ["perf", "script", "-i", data, "-F", "comm,ip,sym,dso"],
        capture_output=True, text=True, check=True).stdout
    totals, n = Counter(), 0
    for sample in out.split("\n\n"):
        # The thread's name, then the frames, leaf first.
        frames = [l.strip() for l in sample.strip().splitlines()[1:] if l.strip()]
        if not frames:
            continue
        n += 1
        cat = "other"
        for f in frames:
            kernel = "kernel.kallsyms" in f
            # "address symbol (dso)": the symbol alone, marked when it is the kernel's.
            sym = re.sub(r"^[0-9a-f]+ ", "", f)
            name = ("[k] " if kernel else "") + sym
            hit = next((c for c, rx in CATEGORIES if re.search(rx, name)), None)
            if hit:
                cat = hit
                break
        totals[cat] += 1
    print(f"{n} samples")
    for cat, k in totals.most_common():
        print(f"  {cat:36s} {100 * k / n:5.1f}%")


if __name__ == "__main__":
    main()
