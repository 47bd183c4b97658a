"""The ServerApp: FedAvg wrapped in leakshield's auditing strategy (settings: pyproject's run config)."""

from pathlib import Path

from leakshield.flower import server_app

app = server_app(base=Path(__file__).parent)
