"""leakshield: measure and defend the privacy of federated learning against gradient leakage."""

__version__ = "0.2.0"

from leakshield import old_import_paths  # noqa: F401  (the import paths of 0.2 keep working)
