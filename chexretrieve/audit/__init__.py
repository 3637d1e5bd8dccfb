"""The audit trail: an append-only JSON-lines file of who searched, viewed or exported which
studies, and when; every record HMAC-signed under a key kept outside the file, chained to the one
before, and summed up by a signed head record (see docs/hardening-audit.md)."""

from chexretrieve.audit.config import AUDIT_ENV, AuditConfig, default_audit_path
from chexretrieve.audit.keys import AUDIT_KEY_ENV, AuditIntegrityError, default_key_path
from chexretrieve.audit.log import AuditLog, open_audit_log
from chexretrieve.audit.verify import AuditReport, check_audit_file, verify_audit_file

__all__ = [
    "AUDIT_ENV",
    "AUDIT_KEY_ENV",
    "AuditConfig",
    "AuditIntegrityError",
    "AuditLog",
    "AuditReport",
    "check_audit_file",
    "default_audit_path",
    "default_key_path",
    "open_audit_log",
    "verify_audit_file",
]
