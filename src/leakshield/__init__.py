"""leakshield: measure and defend the privacy of federated learning against gradient leakage."""

__version__ = "0.2.0"

from leakshield import old_import_paths  # noqa: F401  (the import paths of 0.2 keep working)


def __getattr__(name: str) -> object:
    """``leakshield.audit`` (:func:`leakshield.model_audit.audit`), imported on first use. By name, not by
    an import statement: the package root is part of every cell's code closure
    (:mod:`leakshield.code_graph`), which must not grow by everything the audit reaches."""
    if name == "audit":
        import importlib

        return importlib.import_module("leakshield.model_audit").audit
    raise AttributeError(f"module 'leakshield' has no attribute {name!r}")
