"""Password hashing (argon2id, argon2-cffi's defaults per RFC 9106) and the password policy.

The policy: a length range, not the user name, and a strength estimate from zxcvbn (Dropbox's
estimator, the ``zxcvbn`` package on PyPI) of at least ``AccessConfig.min_password_score``, with
the user name (and its parts) and the site's words given to it as words an attacker tries first;
a refusal says why, in zxcvbn's words."""

from __future__ import annotations

import re

from argon2 import PasswordHasher
from argon2.exceptions import InvalidHashError, VerificationError, VerifyMismatchError

#: longest password accepted (a longer one is refused before hashing, so it costs nothing)
MAX_PASSWORD_LENGTH = 1024

_HASHER = PasswordHasher()  # argon2id, t=3, m=64 MiB, p=4 (RFC 9106 low-memory profile)
# verified against when the user is unknown, so an unknown name takes as long as a wrong password
_DUMMY = _HASHER.hash("not a password of anyone: equal timing for unknown names")


#: characters of a password the strength estimate reads (its cost grows with the length; a longer
#: password can only be stronger than its first 100 characters)
ESTIMATED_LENGTH = 100
#: zxcvbn's scores, in words
SCORE_WORDS = ("very easy", "easy", "fairly easy", "hard", "very hard")


def check_password(
    password: str,
    name: str,
    min_length: int,
    min_score: int = 3,
    site_words: tuple[str, ...] = (),
) -> None:
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
    strength = password_strength(password, name, site_words)
    if strength["score"] < min_score:
        feedback = strength.get("feedback") or {}
        why = " ".join(
            t for t in [feedback.get("warning"), *(feedback.get("suggestions") or [])] if t
        )
        raise ValueError(
            f"the password is too easy to guess ({SCORE_WORDS[strength['score']]}: strength "
            f"{strength['score']} of 4, at least {min_score} needed"
            f"{', it is built from the user name or the site' if _uses_context(strength) else ''})"
            f"{': ' + why if why else ''}"
        )


def password_strength(password: str, name: str, site_words: tuple[str, ...] = ()) -> dict:
    """zxcvbn's estimate of ``password`` (score 0-4, feedback), with the user name, its parts and
    ``site_words`` as the words an attacker would try first."""
    from zxcvbn import zxcvbn

    context = [name, *re.split(r"[._@\-\s]+", name)]
    for words in site_words:
        context += [words, *words.split()]
    context = [w.lower() for w in context if len(w) >= 2]
    return zxcvbn(password[:ESTIMATED_LENGTH], user_inputs=context)


def _uses_context(strength: dict) -> bool:
    return any(m.get("dictionary_name") == "user_inputs" for m in strength.get("sequence") or ())


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
