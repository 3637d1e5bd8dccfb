"""Password hashing (argon2id, argon2-cffi's defaults per RFC 9106) and the password policy."""

from __future__ import annotations

from argon2 import PasswordHasher
from argon2.exceptions import InvalidHashError, VerificationError, VerifyMismatchError

#: longest password accepted (a longer one is refused before hashing, so it costs nothing)
MAX_PASSWORD_LENGTH = 1024

_HASHER = PasswordHasher()  # argon2id, t=3, m=64 MiB, p=4 (RFC 9106 low-memory profile)
# verified against when the user is unknown, so an unknown name takes as long as a wrong password
_DUMMY = _HASHER.hash("not a password of anyone: equal timing for unknown names")


def check_password(password: str, name: str, min_length: int) -> None:
    """ValueError saying what is wrong with a new password."""
    if len(password) < min_length:
        raise ValueError(
            f"the password must have at least {min_length} characters (it has {len(password)})"
        )
    if len(password) > MAX_PASSWORD_LENGTH:
        raise ValueError(f"the password must have at most {MAX_PASSWORD_LENGTH} characters")
    if password.strip().lower() == name.strip().lower():
        raise ValueError("the password must not be the user name")
    if len(set(password)) < 4:
        raise ValueError("the password must use at least 4 different characters")


def hash_password(password: str) -> str:
    """The argon2id PHC string of ``password`` (a fresh random salt each call)."""
    return _HASHER.hash(password)


def verify_password(stored: str | None, password: str) -> bool:
    """Whether ``password`` matches ``stored`` (None: check a dummy hash, answer False)."""
    if len(password) > MAX_PASSWORD_LENGTH:
        return False
    try:
        return _HASHER.verify(stored or _DUMMY, password) and stored is not None
    except (VerifyMismatchError, VerificationError, InvalidHashError):
        return False


def needs_rehash(stored: str) -> bool:
    """Whether ``stored`` was made with weaker parameters than today's defaults."""
    try:
        return _HASHER.check_needs_rehash(stored)
    except InvalidHashError:
        return True
