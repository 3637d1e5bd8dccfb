"""The audit trail: an append-only, hash-chained JSON-lines file of who searched, viewed or
exported which studies, and when (see README, "Audit trail")."""

from chexretrieve.audit.config import AUDIT_ENV, AuditConfig, default_audit_path
from chexretrieve.audit.log import AuditLog, open_audit_log, verify_audit_file

__all__ = [
    "AUDIT_ENV",
    "AuditConfig",
    "AuditLog",
    "default_audit_path",
    "open_audit_log",
    "verify_audit_file",
]
