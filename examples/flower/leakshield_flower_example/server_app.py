"""The ServerApps: FedAvg wrapped in leakshield's auditing strategy (``app``), or FedAvg under SecAgg+
auditing each round's aggregate (``secagg_app``; its config must set fl.secure_aggregation, e.g.
``--run-config "config='secagg.yaml'"``). Settings: pyproject's run config."""

from pathlib import Path

from leakshield.flower import secure_server_app, server_app

app = server_app(base=Path(__file__).parent)
secagg_app = secure_server_app(base=Path(__file__).parent)
