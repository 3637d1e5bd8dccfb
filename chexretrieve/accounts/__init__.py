"""Per-user accounts of the case-lookup server (issue 23): roles, argon2id passwords, throttling.

- :mod:`~chexretrieve.accounts.roles`: radiologist / curator / admin and ``may``/``require``.
- :mod:`~chexretrieve.accounts.book`: ``AccountBook(store)``, the store's ``users`` table with the
  password policy (add, disable, passwd, role, authenticate).
- :mod:`~chexretrieve.accounts.throttle`: failed sign-ins per user and per client, exponential wait.
- :mod:`~chexretrieve.accounts.commands`: ``chexretrieve users add|disable|enable|passwd|list``.

The web side (sign-in through Gradio, session expiry, the trusted-header mode of an SSO reverse
proxy, the role checks of handlers) is :mod:`chexretrieve.ui.access`.
"""

from chexretrieve.accounts.config import AccessConfig
from chexretrieve.accounts.roles import ACTIONS, LOCAL_ROLE, ROLES, AccessRefused, may, require

__all__ = ["ACTIONS", "LOCAL_ROLE", "ROLES", "AccessConfig", "AccessRefused", "may", "require"]
