"""The Flower bridge under SecAgg+: clients mask their replies with Flower's ``secaggplus_mod``, the server
unmasks only the mean, and the audit attacks that aggregate (skipped without the ``flower`` extra)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import yaml

flwr = pytest.importorskip(
    "flwr", reason="the Flower bridge needs the extra: pip install 'leakshield[flower]'"
)

from leakshield.errors import LeakshieldError  # noqa: E402
from leakshield.experiment.audit import AuditSettings, UpdateAuditor  # noqa: E402
from leakshield.experiment.config import load_config  # noqa: E402
from leakshield.experiment.federation import Federation  # noqa: E402
from leakshield.experiment.store import ResultStore  # noqa: E402
from leakshield.fl import FederatedSimulation  # noqa: E402
from leakshield.fl.secure_aggregation import aggregate_updates  # noqa: E402
from leakshield.flower import LeakshieldTrainer, update_from_reply  # noqa: E402
from leakshield.flower.secure_aggregation import (  # noqa: E402
    aggregate_from_results,
    secure_client_app,
    secure_server_app,
    state_from_arrays,
)

CLIENTS = 3
CONFIG = {
    "name": "flower-secagg-test",
    "dataset": {"name": "digits"},
    "models": [{"name": "lenet"}],
    "fl": {"clients": CLIENTS, "secure_aggregation": True,
           "local": {"algorithm": "fedsgd", "batch_size": 1, "local_lr": 0.1}},
    "attack": {"threat": {"labels_known": True}},
    "attacks": [{"name": "gradient-inversion", "optimizer": "adam", "lr": 0.1, "iterations": 200,
                 "distance": "cosine", "labels": "known"}],
}  # fmt: skip


@pytest.fixture
def config_path(tmp_path: Path) -> Path:
    path = tmp_path / "secagg.yaml"
    path.write_text(yaml.safe_dump(CONFIG))
    return path


def test_the_mean_of_the_replies_is_the_aggregate_update(config_path: Path) -> None:
    """What SecAgg+ reveals (the sample-weighted mean of the replied models) turned back into an update
    equals leakshield's aggregate of the clients' own updates, over every client's samples."""
    trainer = LeakshieldTrainer(config_path)
    sent = trainer.federation(0, 0).fresh_model().state_dict()
    replies = [trainer.train(c, 0, sent, 0) for c in range(CLIENTS)]
    weights = [f.protocol.num_samples for _, f in replies]
    mean = {k: sum(w * s[k] for (s, _), w in zip(replies, weights, strict=True)) / sum(weights) for k in sent}
    got = aggregate_from_results(sent, mean, [f for _, f in replies])
    want = aggregate_updates([update_from_reply(sent, s, f) for s, f in replies])
    assert got.protocol.num_samples == want.protocol.num_samples == sum(weights)
    for name, delta in want.delta.items():
        torch.testing.assert_close(got.delta[name], delta, rtol=1e-4, atol=1e-6)


def test_clients_with_other_update_rules_have_no_common_aggregate(config_path: Path) -> None:
    trainer = LeakshieldTrainer(config_path)
    sent = trainer.federation(0, 0).fresh_model().state_dict()
    (state, a), (_, b) = trainer.train(0, 0, sent, 0), trainer.train(1, 0, sent, 0)
    other = type(b)(**{**vars(b), "protocol": type(b.protocol)(**{**vars(b.protocol), "local_lr": 0.5})})
    with pytest.raises(LeakshieldError, match=r"clients \[1\] trained with another algorithm or lr"):
        aggregate_from_results(sent, state, [a, other])


def test_arrays_that_do_not_fit_the_model_are_refused_in_one_line() -> None:
    like = {"w": torch.zeros(2, 3)}
    with pytest.raises(LeakshieldError, match=r"w: received an array of shape \(3, 2\)"):
        state_from_arrays([torch.zeros(3, 2).numpy()], like)


def test_secagg_plus_simulation_audits_the_aggregate_as_leakshield_does(
    config_path: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """3 clients, 1 round of Flower's SecAgg+ (Ray simulation): the audit attacks the unmasked mean as
    one aggregate of every client's sample, and scores as leakshield's own simulation of the same
    secure-aggregation round does, within SecAgg+'s quantization (clipping ±8 over 2²² levels: ≈ 4e-6
    per parameter, 4e-5 per gradient entry at lr 0.1). Measured: 7.891 / 10.884 / 7.364 dB against
    leakshield's 7.890 / 10.969 / 7.360 (largest gap 0.085 dB); the tolerance is about 6× that."""
    from flwr.simulation import run_simulation

    monkeypatch.setenv("FLWR_TELEMETRY_ENABLED", "0")
    flower_out, sim_out = tmp_path / "flower", tmp_path / "sim"
    server = secure_server_app(
        config_path, defaults={"num-rounds": 1, "out": str(flower_out), "audit-clients": 3}
    )
    backend = {"client_resources": {"num_cpus": 1}, "init_args": {"num_cpus": 2}}
    run_simulation(server, secure_client_app(config_path), num_supernodes=CLIENTS, backend_config=backend)
    config = load_config(config_path)
    fed = Federation.build(config)
    auditor = UpdateAuditor(config, sim_out, settings=AuditSettings(clients=CLIENTS), federation=fed)
    FederatedSimulation.honest(
        fed.fresh_model(), fed.clients, config.fl, fed.pipeline, fed.info, public=fed.data.public,
        seed=fed.seed, observers=[auditor],
    ).run(1)  # fmt: skip
    flower = ResultStore(flower_out / "results.sqlite").records()
    simulated = ResultStore(sim_out / "results.sqlite").records()
    assert [r.status for r in flower] == ["ok"], flower[0].error
    assert [r.status for r in simulated] == ["ok"]
    assert flower[0].threat["aggregated"] and flower[0].metrics["aggregate_clients"] == CLIENTS
    got, want = flower[0].victims, simulated[0].victims
    assert len(got) == len(want) == 1 and len(got[0]["psnr"]) == CLIENTS  # one aggregate of 3 samples
    for a, b in zip(got[0]["psnr"], want[0]["psnr"], strict=True):
        assert a == pytest.approx(b, abs=0.5)
