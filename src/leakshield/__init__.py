"""leakshield: measure and defend the privacy of federated learning against gradient leakage."""

__version__ = "0.2.0"
