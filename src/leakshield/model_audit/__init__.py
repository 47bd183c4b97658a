"""Audit a user's own model (``leakshield audit``, :func:`audit`): their network and data, the federation
they run and the accuracy they can give up; the worst leakage per threat model and the defenses that fit
the budget, in an HTML and PDF report."""

from leakshield.model_audit.api import audit
from leakshield.model_audit.config import AuditConfig, load_audit_config, parse_audit_config
from leakshield.model_audit.report import AuditReport

__all__ = ["AuditConfig", "AuditReport", "audit", "load_audit_config", "parse_audit_config"]
