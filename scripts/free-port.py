#!/usr/bin/env python3
"""Print N (default 1) distinct loopback ports that are free now, one per
line, each below the kernel's ephemeral range (32768 and up on Linux).

A port from bind(0) is in that range, so between this check and the
server's own bind an outgoing connection could take it; a port below the
range can only be taken by an explicit bind. The search starts at a random
port so that scripts run side by side seldom try the same ones.

Usage: scripts/free-port.py [N]
"""

import random
import socket
import sys

LOW, SPAN = 20_000, 12_000


def main() -> None:
    want = int(sys.argv[1]) if len(sys.argv) > 1 else 1
    start = random.randrange(SPAN)
    found = []
    for i in range(SPAN):
        port = LOW + (start + i) % SPAN
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
        found.append(port)
        if len(found) == want:
            print("\n".join(map(str, found)))
            return
    sys.exit(f"free-port.py: fewer than {want} free ports in {LOW}-{LOW + SPAN - 1}")


if __name__ == "__main__":
    main()
