"""Membership attacks and their signals: the observer's statistics on cases with known answers, FedMIA's
reference distribution (never the target client), the pools and coins, the config's one-line errors."""

from __future__ import annotations

import numpy as np
import pydantic
import pytest
import torch

from leakshield.data import load_dataset
from leakshield.defenses.base import DefensePipeline
from leakshield.errors import ConfigError
from leakshield.fl.config import FLConfig, LocalTraining
from leakshield.fl.simulation import FederatedSimulation
from leakshield.membership.attacks import ATTACKS, all_for_one, attack_of, cells, fedmia
from leakshield.membership.config import MembershipConfig, MembershipRow
from leakshield.membership.roc import split_scores
from leakshield.membership.run import draw_pools
from leakshield.membership.signals import SignalObserver, Signals
from leakshield.models import create_model


def _norms(model, data, candidates) -> np.ndarray:
    """‖∇ℓ(θ; x)‖² of each candidate at ``model``'s parameters."""
    from leakshield.gradients import per_sample_gradients

    grads = per_sample_gradients(model.eval(), data.info.normalize(candidates.x), candidates.y)
    return sum((g.flatten(1) ** 2).sum(dim=1) for g in grads.values()).detach().numpy()


def _observe(
    algorithm: str, clients: int = 3, per_round: int | None = None
) -> tuple[Signals, np.ndarray, np.ndarray]:
    """A federation of one-record clients; the candidates are those records and one outsider each. Also
    the candidates' squared gradient norms at the untrained model and at the final one."""
    data = load_dataset("digits", {"size": 8})
    records = [data.train.subset([i]) for i in range(clients)]
    local = LocalTraining(algorithm=algorithm, local_lr=0.05, local_epochs=1, batch_size=1)
    fl = FLConfig(clients=clients, local=local, clients_per_round=per_round)
    model = create_model(
        "mlp", {"hidden_layers": 1, "width": 16}, in_shape=data.info.shape, num_classes=10, seed=0
    )
    candidates = data.train.subset(list(range(clients)) + list(range(100, 100 + clients)))
    owner = torch.tensor(list(range(clients)) * 2)
    observer = SignalObserver(candidates, owner, clients, data.info, algorithm=algorithm, local_lr=0.05)
    first = _norms(model, data, candidates)
    sim = FederatedSimulation.honest(
        model, records, fl, DefensePipeline(), data.info, observers=[observer], seed=0
    )
    sim.run(2)
    return observer.signals(), first, _norms(sim.model, data, candidates)


def test_a_client_that_sent_nothing_has_no_statistic():
    """Two of three clients per round: the third's cosine, loss and its records' Grad-Diff are NaN that
    round (FedMIA's fit skips it), never a 0 that would read as a statistic."""
    found, _, _ = _observe("fedsgd", per_round=2)
    for r in range(2):
        silent = [c for c in range(3) if np.isnan(found.cosine[r, c]).all()]
        assert len(silent) == 1, found.cosine[r]
        c = silent[0]
        assert np.isnan(found.client_loss[r, c]).all()
        assert np.isnan(found.owner_diff[r, [c, c + 3]]).all()
        assert np.isfinite(np.delete(found.cosine[r], c, axis=0)).all()


@pytest.mark.parametrize("algorithm", ["fedsgd", "fedavg"])
def test_own_record_is_the_step_direction(algorithm):
    """A client of one record taking one step: its step is −lr·∇ℓ(x), so the cosine of x's descent
    direction with its own client's step is exactly 1 (FedSGD's delta is the gradient, FedAvg's the
    parameter change: a wrong sign gives −1)."""
    found, first, last = _observe(algorithm)
    assert found.cosine.shape == (2, 3, 6)
    # Grad-Diff at round 0, both terms at θ_0: 2⟨−g, −lr·g⟩ − ‖g‖² = (2·lr − 1)‖g‖² (lr 0.05)
    assert found.owner_diff[0, :3] == pytest.approx((2 * 0.05 - 1) * first[:3], rel=1e-4)
    # the gradient norm of the last round is at the model it released, not the one it started from
    assert found.gradient_norm[-1] == pytest.approx(last, rel=1e-4)
    assert not np.allclose(found.gradient_norm[0], first, rtol=1e-3)
    for c in range(3):
        assert found.cosine[:, c, c] == pytest.approx(1.0, abs=1e-5)
    assert np.all(found.cosine[:, [1, 2], [0, 0]] < 0.999)  # another client's record is not its step
    # a one-record client's local model fits its record better than the other clients' models do
    for c in range(3):
        others = [k for k in range(3) if k != c]
        assert np.all(found.client_loss[:, c, c][:, None] < found.client_loss[:, others, c])
    assert found.local_loss[:, :3] == pytest.approx(found.client_loss[:, [0, 1, 2], [0, 1, 2]])
    assert found.rounds.tolist() == [0, 1]
    assert found.gradient_norm.shape == (2, 6) and np.all(found.gradient_norm > 0)


def _planted(effect: float, seed: int, clients: int = 20, n: int = 600) -> tuple[Signals, np.ndarray]:
    """Synthetic signals: every client's cosine statistic N(0, 1) per record, plus ``effect`` on the owner's
    members (the planted membership signal), 3 rounds."""
    rng = np.random.default_rng(seed)
    owner = np.repeat(np.arange(clients), n // clients)
    member = np.tile(np.r_[np.ones(n // clients // 2, bool), np.zeros(n // clients // 2, bool)], clients)
    cosine = rng.normal(size=(3, clients, n)) * rng.uniform(0.5, 2.0, size=(1, 1, n))  # per-record scale
    cosine[:, owner[member], np.flatnonzero(member)] += (
        effect * rng.uniform(0.5, 2.0, size=(1, 1, n))[0, 0, member]
    )
    zeros = np.zeros((3, n))
    losses = np.zeros((3, clients, n))
    found = Signals(cosine=cosine, owner_diff=zeros, client_loss=losses, gradient_norm=zeros,
                    global_loss=zeros, global_cosine=zeros, owner=owner, rounds=np.arange(3))  # fmt: skip
    return found, member


def test_fedmia_sees_a_planted_signal_and_not_a_null():
    """Planted: members' own-client statistic shifted by ~1 per-record scale → FedMIA's TPR at 1 % FPR
    well above 1 % in every one of 20 draws (measured 20/20, mean ≈ 0.5); null (no shift) → its 20
    draws average TPR ≈ what a guess scores, chance_tpr(300, 0.01) = 0.013 (measured mean 0.011)."""
    planted = [split_scores(fedmia(s), m).tpr_at(0.01) for s, m in (_planted(1.0, k) for k in range(20))]
    null = [split_scores(fedmia(s), m).tpr_at(0.01) for s, m in (_planted(0.0, k) for k in range(20))]
    assert min(planted) > 0.1
    assert np.mean(null) < 0.03


def test_fedmia_never_fits_its_reference_to_the_owner():
    """The owner's own statistic must not move the Gaussian it is tested against: changing it moves only
    the numerator. With the owner inside its reference (the broken step) this fails."""
    found, _ = _planted(0.0, 3)
    before = all_for_one(found, found.cosine)
    pushed = found.cosine.copy()
    n = len(found.owner)
    pushed[:, found.owner, np.arange(n)] += 5.0
    after = all_for_one(found, pushed)
    from scipy.stats import norm

    # Φ⁻¹ recovers the z-score: it must move by exactly 5/σ_others, the same σ as before
    z0, z1 = norm.ppf(np.clip(before, 1e-15, 1 - 1e-15)), norm.ppf(np.clip(after, 1e-15, 1 - 1e-15))
    masked = np.where(np.eye(20, dtype=bool)[found.owner].T[None], np.nan, found.cosine)
    sd = np.sqrt(np.nanvar(masked, axis=1) + 1e-8)
    moved = (z1 - z0) * sd
    finite = (np.abs(z1) < 5) & (np.abs(z0) < 5)
    assert finite.sum() > 1000  # of 1,800 (3 rounds × 600 candidates)
    assert moved[finite] == pytest.approx(np.full(finite.sum(), 5.0), abs=1e-4)


def test_fedmia_needs_other_clients():
    found, _ = _planted(0.0, 0, clients=2, n=20)
    with pytest.raises(ValueError, match="at least 2 other clients"):
        fedmia(found)


def test_cells_respect_secure_aggregation_and_rounds():
    all_cells = [c for c, _, _ in cells([0, 29], secure_aggregation=False)]
    assert "loss@0" in all_cells and "loss@29" in all_cells and "fedmia" in all_cells
    hidden = [c for c, _, _ in cells([0, 29], secure_aggregation=True)]
    assert "fedmia" not in hidden and "loss@0" not in hidden and "global-loss@0" in hidden
    assert all(attack_of(c).global_view for c in hidden)
    assert attack_of("gradient-cosine@29").name == "gradient-cosine"
    for attack in ATTACKS.values():
        assert attack.reference and attack.threat.who == "honest-but-curious server"
        assert attack.threat.secure_aggregation == attack.global_view


def test_pools_are_halved_disjoint_and_seeded():
    members, outside = draw_pools(1000, 10, 30, seed=0)
    flat = torch.cat(members + outside)
    assert len(flat) == 300 and len(set(flat.tolist())) == 300
    assert all(len(m) == 15 and len(o) == 15 for m, o in zip(members, outside, strict=True))
    again, _ = draw_pools(1000, 10, 30, seed=0)
    other, _ = draw_pools(1000, 10, 30, seed=1)
    assert all(torch.equal(a, b) for a, b in zip(members, again, strict=True))
    assert not all(torch.equal(a, b) for a, b in zip(members, other, strict=True))
    with pytest.raises(ConfigError, match="exceeds the 100 training records"):
        draw_pools(100, 10, 30, seed=0)


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"attack_rounds": []}, "empty"),
        ({"rows": [{"label": "dp", "stack": [{"name": "dp-sgd"}]}]}, "labelled 'none'"),
        ({"rows": [{"label": "none"}, {"label": "none"}]}, "labels repeat"),
        ({"attack_rounds": [40]}, "not observed"),
        ({"rounds": 10, "observe_every": 4, "attack_rounds": [5]}, "not observed"),
        ({"clients": 3}, "greater than or equal to 4"),
        ({"seeds": [1, 1]}, "seeds repeat"),
        ({"rows": [{"label": "none", "secure_aggregation": True}]}, "labelled 'none'"),
    ],
)
def test_config_errors_name_the_field(changes, message):
    with pytest.raises(pydantic.ValidationError, match=message):
        MembershipConfig(**changes)


def test_config_defaults_and_rounds():
    config = MembershipConfig(rounds=10, observe_every=4)
    assert config.observed_rounds == {0, 4, 8, 9}
    assert config.rounds_attacked == [0, 9]
    assert MembershipRow(label="x", stack=[{"name": "pruning", "ratio": 0.5}]).entries == [
        {"name": "pruning", "params": {"ratio": 0.5}}
    ]


def test_kept_runs_are_reused_only_when_everything_matches(tmp_path, monkeypatch):
    from leakshield.membership import kept
    from leakshield.membership.run import SeedRun

    calls = []

    def compute() -> SeedRun:
        calls.append(1)
        return SeedRun("none", 0, [True, False], [1, 2], {"loss@0": [0.5, 0.1]}, 0.9, 0.1, 1.0)

    config, row = MembershipConfig(), MembershipRow(label="none")
    first, reused = kept.kept_run(tmp_path, config, row, 0, compute)
    again, reused_again = kept.kept_run(tmp_path, config, row, 0, compute)
    assert (reused, reused_again) == (False, True) and again == first and len(calls) == 1
    _, reused = kept.kept_run(tmp_path, config.model_copy(update={"fpr": 0.05}), row, 0, compute)
    assert reused and len(calls) == 1  # the FPR level is reporting only
    kept.kept_run(tmp_path, config.model_copy(update={"rounds": 29}), row, 0, compute)  # another setting
    assert len(calls) == 2
    kept.kept_run(tmp_path, config, row, 0, compute, device="cuda")  # another device
    assert len(calls) == 3
    kept.kept_run(tmp_path, config, row, 0, compute)
    _, reused = kept.kept_run(tmp_path, config, row, 0, compute)
    assert reused and len(calls) == 4
    monkeypatch.setattr(kept, "code_digest", lambda: "edited")  # a module on the path changed
    kept.kept_run(tmp_path, config, row, 0, compute)
    assert len(calls) == 5
    kept.run_path(tmp_path, "none", 0).write_text("{not json", encoding="utf-8")
    kept.kept_run(tmp_path, config, row, 0, compute)
    assert len(calls) == 6


def test_the_kept_key_covers_the_code_a_run_executes():
    from leakshield.membership.kept import code_closure

    closure = code_closure()
    expected = (
        "leakshield.membership.signals", "leakshield.membership.attacks", "leakshield.membership.run",
        "leakshield.fl.simulation", "leakshield.fl.client", "leakshield.gradients",
        "leakshield.defenses.dpsgd",
        "leakshield.defenses.dp_fedavg", "leakshield.models.mlp", "leakshield.data.digits",
        "leakshield.metrics.utility",
    )  # fmt: skip
    for module in expected:
        assert module in closure, module
