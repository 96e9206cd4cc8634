"""What /proc says of a process, for the tests that check whose it is and
what its environment holds (run as root, they may read any)."""
from __future__ import annotations


def uid_of(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        return int(next(line for line in f if line.startswith("Uid:")).split()[1])


def environ_of(pid: int) -> dict[str, str]:
    with open(f"/proc/{pid}/environ", "rb") as f:
        return dict(kv.decode().split("=", 1) for kv in f.read().split(b"\0") if b"=" in kv)
