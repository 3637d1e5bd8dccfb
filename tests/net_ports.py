"""Free local TCP ports for the servers the tests start (one helper for every test folder: the
root conftest puts tests/ on sys.path; scripts run on their own put it there themselves)."""

from __future__ import annotations

import socket


def free_port() -> int:
    """A port on 127.0.0.1 that nothing listens on at this moment."""
    return free_ports(1)


def free_ports(count: int) -> int:
    """The first of ``count`` consecutive ports on 127.0.0.1 that are free at this moment (a
    ``serve --workers N`` listens on N of them)."""
    for _ in range(200):
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            first = sock.getsockname()[1]
        if first + count > 65536:
            continue
        try:
            for port in range(first + 1, first + count):
                with socket.socket() as probe:
                    probe.bind(("127.0.0.1", port))
            return first
        except OSError:
            continue
    raise AssertionError(f"no run of {count} free ports on 127.0.0.1")
