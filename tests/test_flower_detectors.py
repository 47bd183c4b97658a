"""The client-side detectors as Flower sees them: in a real Flower simulation, a malicious ServerApp
sends models prepared by active attacks, and the clients' guard mod (the config's guards, ahead of the
train step) refuses them with an error reply, while the honest model trains (skipped without the
``flower`` extra)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
import yaml

flwr = pytest.importorskip(
    "flwr", reason="the Flower bridge needs the extra: pip install 'leakshield[flower]'"
)

from flwr.app import ArrayRecord, ConfigRecord, Context, Message, MessageType, RecordDict  # noqa: E402
from flwr.serverapp import Grid, ServerApp  # noqa: E402

from leakshield.attacks import create_attack  # noqa: E402
from leakshield.experiment.config import load_config  # noqa: E402
from leakshield.experiment.federation import Federation  # noqa: E402
from leakshield.fl import ServerKnowledge  # noqa: E402
from leakshield.flower import client_app  # noqa: E402

CONFIG = {
    "name": "flower-detectors-test",
    "dataset": {"name": "digits", "channels": 1, "size": 16},
    "models": [{"name": "mlp", "width": 64}],
    "fl": {"clients": 2, "local": {"algorithm": "fedsgd", "batch_size": 16, "local_lr": 0.1}},
    "defenses": [{"label": "guards", "stack": ["row-guard", "loss-guard", "dominance-guard"]}],
    "attacks": [{"name": "ig", "iterations": 5}],
}


def malicious_server(config_path: Path, replies: dict[str, list[str]]) -> ServerApp:
    """A ServerApp that sends every node the model each attack prepares (then the honest one) for one
    train round each and records, per model, each reply's error reason ('' for an update)."""
    app = ServerApp()

    @app.main()
    def main(grid: Grid, context: Context) -> None:
        fed = Federation.build(load_config(config_path))
        honest = fed.fresh_model()
        knowledge = ServerKnowledge(fed.info, fed.data.public)
        models = {
            name: create_attack(name, params).prepare_model(honest, knowledge).model
            for name, params in (("fishing", {}), ("feature-fishing", {}), ("trap-weights", {}))
        }
        models["honest"] = honest
        nodes: list[int] = []
        while len(nodes) < 2:
            nodes = list(grid.get_node_ids())
            time.sleep(0.1)
        for server_round, (name, model) in enumerate(models.items(), start=1):
            content = RecordDict(
                {
                    "arrays": ArrayRecord(model.state_dict()),
                    "config": ConfigRecord({"server-round": server_round}),
                }
            )
            messages = [Message(content, dst_node_id=n, message_type=MessageType.TRAIN) for n in nodes]
            replies[name] = [r.error.reason if r.has_error() else "" for r in grid.send_and_receive(messages)]

    return app


def test_the_guard_mod_refuses_active_attacks_models_in_a_flower_simulation(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from flwr.simulation import run_simulation

    monkeypatch.setenv("FLWR_TELEMETRY_ENABLED", "0")
    path = tmp_path / "guards.yaml"
    path.write_text(yaml.safe_dump(CONFIG))
    replies: dict[str, list[str]] = {}
    backend = {"client_resources": {"num_cpus": 1}, "init_args": {"num_cpus": 2}}
    run_simulation(
        malicious_server(path, replies), client_app(path), num_supernodes=2, backend_config=backend
    )
    assert set(replies) == {"fishing", "feature-fishing", "trap-weights", "honest"}, replies
    for attack in ("fishing", "feature-fishing", "trap-weights"):
        assert len(replies[attack]) == 2 and all("refused the model" in r for r in replies[attack]), replies
    # the first guard of the stack that refuses names itself: fishing's zeroed classifier rows are
    # near-duplicates of one another (row-guard); trap weights' rows are not, their units are owned
    assert all("row-guard" in r for r in replies["fishing"] + replies["feature-fishing"]), replies
    assert all("dominance-guard" in r for r in replies["trap-weights"])
    assert replies["honest"] == ["", ""]  # the honest model trains on both clients
