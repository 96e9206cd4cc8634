"""Free ports for servers this host starts (hub tests, model replicas),
chosen below the kernel's ephemeral range: a port picked by binding port 0
is an ephemeral one, which any outgoing connection may take before the
server binds it."""
from __future__ import annotations

import random
import socket

LOWEST = 20000


def ephemeral_start(path: str = "/proc/sys/net/ipv4/ip_local_port_range") -> int:
    try:
        with open(path) as f:
            return int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768  # Linux's default


def ports_below_ephemeral(n: int, rng: random.Random = random.SystemRandom()) -> int:
    """The first of ``n`` consecutive ports, all free now, below the
    ephemeral range (anywhere free, if that range leaves no room)."""
    top = ephemeral_start() - n
    for _ in range(500):
        base = rng.randrange(LOWEST, top) if top > LOWEST else rng.randrange(1024, 65535 - n)
        if all(_free(p) for p in range(base, base + n)):
            return base
    raise RuntimeError(f"no {n} consecutive free ports")


def _free(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True
