"""Settings of the audit trail (who searched, viewed or exported which studies, and when)."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

#: environment variable naming the audit file (overrides the default location)
AUDIT_ENV = "CHEXRETRIEVE_AUDIT_LOG"


def default_audit_path() -> Path:
    """``$CHEXRETRIEVE_AUDIT_LOG``, else ``$XDG_STATE_HOME/chexretrieve/audit.jsonl``."""
    named = os.environ.get(AUDIT_ENV, "").strip()
    if named:
        return Path(named).expanduser()
    state = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(state) / "chexretrieve" / "audit.jsonl"


@dataclass(frozen=True)
class AuditConfig:
    # JSON-lines file the audit records are appended to; None = $CHEXRETRIEVE_AUDIT_LOG, else
    # $XDG_STATE_HOME/chexretrieve/audit.jsonl (created with mode 0600)
    path: Path | None = None
    # write the audit trail at all (turning it off is for tests and benchmarks, not for clinics)
    enabled: bool = True
    # fsync every record and head record before the action goes on (survives a power cut; one
    # disk flush per action); off only for benchmarks
    fsync: bool = True
    # HMAC key file signing every record and the head record, kept outside the audit file and
    # created (mode 0600) on first use; None = $CHEXRETRIEVE_AUDIT_KEY, else
    # $XDG_CONFIG_HOME/chexretrieve/audit.key
    key_path: Path | None = None

    @property
    def resolved_path(self) -> Path:
        return Path(self.path).expanduser() if self.path is not None else default_audit_path()

    @property
    def resolved_key_path(self) -> Path:
        from chexretrieve.audit.keys import default_key_path

        return Path(self.key_path).expanduser() if self.key_path is not None else default_key_path()
