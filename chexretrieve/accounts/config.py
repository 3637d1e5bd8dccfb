"""Settings of sign-in to `chexretrieve serve`: passwords, throttling, sessions, SSO header."""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass


@dataclass(frozen=True)
class AccessConfig:
    # shortest password `chexretrieve users add/passwd` accepts (characters)
    min_password_length: int = 12
    # least zxcvbn strength score (0-4) of a new password, estimated with the user name and
    # `site_words` as words an attacker would try first
    min_password_score: int = 3
    # words of this site an attacker would try in a password (its name, the application's)
    site_words: tuple[str, ...] = ("chexretrieve", "case lookup", "radiology")
    # failed sign-ins of one user name allowed before each further one waits (lockout)
    user_free_failures: int = 5
    # failed sign-ins from one client address allowed before each further one waits
    client_free_failures: int = 20
    # wait in seconds after the first failure beyond the free ones; doubles with each further one
    first_delay_s: float = 2.0
    # longest wait in seconds between two sign-in attempts of one user or client
    max_delay_s: float = 900.0
    # seconds after which the failures of a user name or address that saw no attempt are forgotten
    failure_memory_s: float = 24 * 3600.0
    # password checks (argon2id, 64 MiB each) one server process runs at once; more wait
    max_concurrent_hashes: int = 4
    # sign-ins one server process lets wait for a password check; beyond, 503 at once
    max_waiting_sign_ins: int = 64
    # seconds a sign-in waits for a password check before it is answered 503 (busy)
    sign_in_wait_s: float = 30.0
    # seconds a sign-in lasts at most, active or not; then the user signs in again
    session_max_age_s: int = 8 * 3600
    # seconds without any request after which a sign-in ends
    session_idle_s: int = 1800
    # trusted-header (SSO reverse proxy) mode: the HTTP header carrying the signed-in user's name
    # (e.g. "X-Remote-User"); None = accounts sign in with their password
    trusted_header: str | None = None
    # addresses or networks (CIDR) of the reverse proxies whose `trusted_header` is believed
    # (every request from anywhere else is refused in that mode) and, with accounts, whose
    # X-Forwarded-For names the client that sign-in failures are counted under
    trusted_proxies: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if not 8 <= self.min_password_length <= 1024:
            raise ValueError(
                f"min_password_length must be between 8 and 1024, got {self.min_password_length}"
            )
        if self.user_free_failures < 1 or self.client_free_failures < 1:
            raise ValueError("the free failed sign-ins must be at least 1")
        if not 0 < self.first_delay_s <= self.max_delay_s:
            raise ValueError("first_delay_s must be positive and at most max_delay_s")
        if not 0 <= self.min_password_score <= 4:
            raise ValueError(
                f"min_password_score is a zxcvbn score 0-4, not {self.min_password_score}"
            )
        if self.max_concurrent_hashes < 1 or self.max_waiting_sign_ins < 0:
            raise ValueError("max_concurrent_hashes must be at least 1, max_waiting_sign_ins >= 0")
        if self.sign_in_wait_s <= 0 or self.failure_memory_s < self.max_delay_s:
            raise ValueError(
                "sign_in_wait_s must be positive and failure_memory_s at least max_delay_s"
            )
        if self.session_max_age_s < 60 or self.session_idle_s < 60:
            raise ValueError("sessions must last at least 60 s (session_max_age_s, session_idle_s)")
        if self.trusted_header is not None:
            if not self.trusted_header.strip() or not all(
                c.isalnum() or c == "-" for c in self.trusted_header
            ):
                raise ValueError(
                    f"trusted_header must be an HTTP header name such as X-Remote-User, "
                    f"got {self.trusted_header!r}"
                )
            if not self.trusted_proxies:
                raise ValueError(
                    "the trusted-header mode needs the proxies' addresses (--trusted-proxy); "
                    "otherwise anyone could send the header"
                )
        for proxy in self.trusted_proxies:
            try:
                ipaddress.ip_network(proxy, strict=False)
            except ValueError:
                raise ValueError(
                    f"trusted proxy {proxy!r} is not an IP address or network (CIDR)"
                ) from None

    def is_trusted_proxy(self, address: str | None) -> bool:
        """Whether a request from ``address`` may name its user in ``trusted_header``."""
        if not address:
            return False
        try:
            ip = ipaddress.ip_address(address)
        except ValueError:
            return False
        return any(ip in ipaddress.ip_network(p, strict=False) for p in self.trusted_proxies)
