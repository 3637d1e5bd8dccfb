"""Checking that the UI's port is free before anything slow is loaded (one clear line, no trace)."""

from __future__ import annotations

import errno
import socket


def ensure_port_free(host: str, port: int) -> None:
    """ValueError naming the port and the ``--port`` option when ``host:port`` cannot be bound."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as the web server does
        try:
            probe.bind((host, port))
        except OSError as exc:
            busy = exc.errno == errno.EADDRINUSE
            why = "is already in use" if busy else f"cannot be used ({exc.strerror or exc})"
            raise ValueError(
                f"port {port} on {host} {why}; stop the program holding it or choose another "
                f"with --port N (make demo PORT=N)"
            ) from None
