"""DP-FedAvg's settings beside Flower's DP wrappers (flwr 1.41): the same noise std and the same
budget split for adaptive clipping; and a finding — Flower's adaptive clipping moves the bound away
from the target quantile, because its norm bit marks a *clipped* update where Andrew et al.'s marks an
unclipped one, under the same geometric update."""

from __future__ import annotations

import numpy as np
import pytest
import torch

flwr = pytest.importorskip("flwr", reason="the Flower bridge needs pip install 'leakshield[flower]'")

from flwr.common import Code, FitRes, Status, ndarrays_to_parameters  # noqa: E402
from flwr.server.strategy import DifferentialPrivacyServerSideAdaptiveClipping, FedAvg  # noqa: E402
from flwr.supercore.differential_privacy import compute_adaptive_noise_params, compute_stdv  # noqa: E402

from leakshield.crossdevice.clipping import AdaptiveClip, update_noise_multiplier  # noqa: E402
from leakshield.crossdevice.federation import CrossDeviceSettings, run_federation  # noqa: E402
from leakshield.crossdevice.population import digit_population  # noqa: E402


def test_adaptive_budget_split_matches_flower():
    for z, m in ((0.5, 100), (1.0, 100), (1.0, 400)):
        flower_sigma_b, flower_z = compute_adaptive_noise_params(z, m, None)
        assert flower_sigma_b == pytest.approx(m / 20)
        assert update_noise_multiplier(z, m / 20) == pytest.approx(flower_z)


def test_fixed_size_central_noise_is_flowers_server_side_std():
    """A fixed m per round: the noise on the mean is z·S/m, Flower's ``compute_stdv``."""
    pop = digit_population(50, 0.5, 0)
    settings = CrossDeviceSettings(rounds=1, sampling="fixed", sample_rate=0.2, local_lr=0.1, width=16,
                                   dp={"mode": "central", "noise_multiplier": 1.0, "clip": 0.3})  # fmt: skip
    released = run_federation(pop, settings, 0, capture=(0,)).captured[0]
    assert released.aggregate_noise_std == pytest.approx(compute_stdv(1.0, 0.3, 10))


def _results(norms: np.ndarray) -> list:
    return [(None, FitRes(Status(Code.OK, ""), ndarrays_to_parameters([np.array([n, 0.0])]), 1, {}))
            for n in norms]  # fmt: skip


@pytest.mark.parametrize(("start", "runs_to"), [(1.5, "infinity"), (0.5, "zero")])
def test_flowers_adaptive_clipping_runs_away_from_the_target_quantile_and_ours_settles(start, runs_to):
    rng = np.random.default_rng(0)
    flower = DifferentialPrivacyServerSideAdaptiveClipping(
        FedAvg(), noise_multiplier=0.0, num_sampled_clients=50, initial_clipping_norm=start,
        target_clipped_quantile=0.5, clip_norm_lr=0.2, clipped_count_stddev=0.0,
    )  # fmt: skip
    ours = AdaptiveClip(start, target_quantile=0.5, learning_rate=0.2)
    g = torch.Generator().manual_seed(0)
    for r in range(100):
        norms = rng.uniform(0, 2, size=50)  # median 1
        flower.current_round_params = [np.zeros(2)]
        flower.aggregate_fit(r + 1, _results(norms), [])
        ours.step(torch.from_numpy(norms), expected_clients=50, generator=g)
    assert ours.bound == pytest.approx(1.0, abs=0.15)  # half the updates clipped, as asked
    if runs_to == "infinity":
        assert flower.clipping_norm > 100  # no update is clipped any more: the bound grew without end
    else:
        assert flower.clipping_norm < 0.01  # every update is clipped to almost nothing


def test_flowers_accountant_agrees_on_add_remove_and_undercounts_replace_one():
    """Flower's RDP accountant (dp-accounting underneath) passes its noise multiplier z to the
    replace-one event as it is; dp-accounting reads it relative to the replace-one sensitivity, which
    is 2S for updates clipped to S: the ε is that of twice the noise."""
    pytest.importorskip("dp_accounting")
    from flwr.supercore.privacy_accounting import (
        GaussianPrivacyEvent,
        NeighboringRelation,
        PrivacyConfig,
        SamplingMethod,
    )
    from flwr.supercore.privacy_accounting.rdp_accountant import RdpAccountant

    from leakshield.crossdevice.accounting import fixed_size_epsilon, gaussian_epsilon, poisson_epsilon

    def flower_epsilon(sampling, relation, z, m, n, rounds):
        accountant = RdpAccountant(PrivacyConfig(1e-5, n, relation, sampling))
        accountant.compose(GaussianPrivacyEvent(z, m, n), rounds)
        return accountant.get_epsilon(1e-5)

    add_remove = NeighboringRelation.ADD_OR_REMOVE_ONE
    poisson = flower_epsilon(SamplingMethod.POISSON, add_remove, 1.0, 15, 300, 300)
    ours = poisson_epsilon(1.0, 0.05, 300, 1e-5, "add-remove")
    assert ours <= poisson <= 1.15 * ours  # RDP above the PRV estimate (6.46 against 5.81)
    plain = flower_epsilon(SamplingMethod.NO_AMPLIFICATION, add_remove, 1.0, 4, 4, 20)
    assert gaussian_epsilon(1.0, 20, 1e-5, "add-remove") <= plain <= 1.1 * 28.4
    # every client every round, replace-one: the exact ε is 77.3; Flower reports add/remove's
    everyone = flower_epsilon(
        SamplingMethod.WITHOUT_REPLACEMENT, NeighboringRelation.REPLACE_ONE, 1.0, 300, 300, 20
    )
    exact = gaussian_epsilon(1.0, 20, 1e-5, "replace-one")
    assert everyone < 0.5 * exact and everyone == pytest.approx(plain)
    assert fixed_size_epsilon(1.0, 300, 300, 20, 1e-5) >= exact
    # 15 of 300 for 300 rounds: Flower's 11.5 is our bound at twice the noise; ours at this noise: 82.5
    few = flower_epsilon(
        SamplingMethod.WITHOUT_REPLACEMENT, NeighboringRelation.REPLACE_ONE, 1.0, 15, 300, 300
    )
    assert few == pytest.approx(fixed_size_epsilon(2.0, 15, 300, 300, 1e-5))
    assert fixed_size_epsilon(1.0, 15, 300, 300, 1e-5) > 5 * few


def test_flowers_server_side_noise_is_sized_by_the_bound_after_its_update():
    """Updates are clipped at C, then C is updated, then noise z·C'/m is added: when C shrinks, the
    clipped updates get less noise than their sensitivity asks (ours noises with the C it clipped at)."""
    np.random.seed(0)  # Flower draws from numpy's global generator
    m, d, start = 50, 40_000, 1.0
    flower = DifferentialPrivacyServerSideAdaptiveClipping(
        FedAvg(), noise_multiplier=1.0, num_sampled_clients=m, initial_clipping_norm=start,
        target_clipped_quantile=0.5, clip_norm_lr=0.2, clipped_count_stddev=5.0,
    )  # fmt: skip
    flower.current_round_params = [np.zeros(d)]
    direction = np.zeros(d)
    direction[0] = 10.0  # every update has norm 10: all clipped to C = 1
    results = [
        (None, FitRes(Status(Code.OK, ""), ndarrays_to_parameters([direction]), 1, {})) for _ in range(m)
    ]
    params, _ = flower.aggregate_fit(1, results, [])
    from flwr.common import parameters_to_ndarrays

    noise = parameters_to_ndarrays(params)[0][1:]  # the mean of the clipped updates is 0 off entry 0
    assert (
        flower.clipping_norm < 0.95 * start
    )  # Flower's bit counts clipped updates: all of them, so C shrank
    assert noise.std() == pytest.approx(
        compute_stdv(flower.noise_multiplier, flower.clipping_norm, m), rel=0.02
    )
    assert noise.std() < 0.95 * compute_stdv(flower.noise_multiplier, start, m)  # short of what C = 1 needs
