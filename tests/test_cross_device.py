"""Cross-device DP-FedAvg: client-level ε for both adjacencies against independent accountants, the
sampling, the clipping (fixed and adaptive), the noise scale, training, and what the server and an
observer of the global models read."""

from __future__ import annotations

import importlib.util
import math

import pytest
import torch

from leakshield.crossdevice.accounting import (
    dp_accounting_epsilon,
    fixed_size_epsilon,
    gaussian_epsilon,
    poisson_epsilon,
)
from leakshield.crossdevice.clipping import (
    AdaptiveClip,
    centred_count,
    clip_updates,
    update_noise_multiplier,
    update_norms,
)
from leakshield.crossdevice.federation import (
    CrossDeviceSettings,
    local_updates,
    run_federation,
    sample_clients,
)
from leakshield.crossdevice.leakage import (
    best_psnr,
    f1,
    image_leakage,
    prior_guess,
    read_words,
    unit_images,
    word_leakage,
)
from leakshield.crossdevice.models import mlp_classifier, mlp_logits
from leakshield.crossdevice.population import digit_population
from leakshield.errors import ConfigError

needs_dp_accounting = pytest.mark.skipif(
    importlib.util.find_spec("dp_accounting") is None, reason="pip install 'leakshield[dp]'"
)

SAMPLED = [(1.0, 0.05, 300), (0.7, 0.1, 200), (2.0, 0.02, 500), (0.5, 0.05, 300)]


@needs_dp_accounting
@pytest.mark.parametrize("adjacency", ["add-remove", "replace-one"])
@pytest.mark.parametrize(("sigma", "q", "rounds"), SAMPLED)
def test_sampled_epsilon_matches_dp_accounting_within_one_percent(sigma, q, rounds, adjacency):
    ours = poisson_epsilon(sigma, q, rounds, 1e-5, adjacency)
    theirs = dp_accounting_epsilon(sigma, q, rounds, 1e-5, adjacency)
    assert abs(ours - theirs) <= 0.01 * theirs, (ours, theirs)
    assert ours >= theirs * 0.999  # an upper estimate: never the smaller by more than its error


def test_replace_one_costs_more_than_add_remove_and_less_than_half_the_noise():
    for sigma, q, rounds in SAMPLED:
        add = poisson_epsilon(sigma, q, rounds, 1e-5, "add-remove")
        replace = poisson_epsilon(sigma, q, rounds, 1e-5, "replace-one")
        half = poisson_epsilon(sigma / 2, q, rounds, 1e-5, "add-remove")
        assert add < replace < half


@needs_dp_accounting
@pytest.mark.parametrize("adjacency", ["add-remove", "replace-one"])
def test_unsampled_epsilon_is_the_exact_gaussian_composition(adjacency):
    # the leaderboard's 4-client setting: σ 1, every client every round, 20 rounds, δ 1e-5
    exact = {"add-remove": 28.3735, "replace-one": 77.3301}[adjacency]
    assert gaussian_epsilon(1.0, 20, 1e-5, adjacency) == pytest.approx(exact, abs=1e-3)
    assert poisson_epsilon(1.0, 1.0, 20, 1e-5, adjacency) == pytest.approx(exact, abs=1e-3)
    assert dp_accounting_epsilon(1.0, 1.0, 20, 1e-5, adjacency) == pytest.approx(exact, rel=1e-3)


@needs_dp_accounting
def test_fixed_size_sampling_is_accounted_under_replace_one():
    eps = [fixed_size_epsilon(1.0, m, 300, 300, 1e-5) for m in (5, 15, 60)]
    assert eps[0] < eps[1] < eps[2]  # more clients per round: less amplification
    # all of them each round is the unsampled replace-one Gaussian (sensitivity 2S), which RDP bounds
    # from above, loosely (81.1 against the exact 77.3): the noise is z/2 of the replace-one sensitivity
    exact = gaussian_epsilon(1.0, 20, 1e-5, "replace-one")
    assert exact <= fixed_size_epsilon(1.0, 300, 300, 20, 1e-5) <= 1.1 * exact


def test_accounting_refuses_nonsense_in_one_line():
    for args in ((1.0, 0.0, 10, 1e-5), (1.0, 0.1, 10, 1.0), (-1.0, 0.1, 10, 1e-5)):
        with pytest.raises(ValueError, match=r"^[^\n]+$"):
            poisson_epsilon(*args, "add-remove")
    with pytest.raises(ValueError, match="adjacency"):
        poisson_epsilon(1.0, 0.1, 10, 1e-5, "swap")


def test_poisson_sampling_draws_each_client_at_its_rate_and_fixed_draws_m():
    g = torch.Generator().manual_seed(0)
    poisson = CrossDeviceSettings(sample_rate=0.05)
    counts = torch.tensor([len(sample_clients(300, poisson, g)) for _ in range(2000)], dtype=torch.float)
    assert counts.mean().item() == pytest.approx(15, abs=0.3)  # 3 standard errors of the mean: 0.26
    assert counts.var().item() == pytest.approx(300 * 0.05 * 0.95, rel=0.15)
    fixed = CrossDeviceSettings(sample_rate=0.05, sampling="fixed")
    draws = [sample_clients(300, fixed, g) for _ in range(200)]
    assert all(len(d) == 15 and len(set(d.tolist())) == 15 for d in draws)
    hits = torch.zeros(300)
    for d in draws:
        hits[d] += 1
    # each client is drawn 200·15/300 = 10 times on average (binomial sd 3.1): every one at least once
    assert hits.min() >= 1 and hits.max() <= 30


def test_clipping_bounds_each_client_and_leaves_small_updates_alone():
    updates = {"a": torch.tensor([[3.0, 4.0], [0.3, 0.4]]), "b": torch.zeros(2, 3)}
    out = clip_updates(updates, 1.0)
    assert update_norms(out).tolist() == pytest.approx([1.0, 0.5])
    assert out["a"][0].tolist() == pytest.approx([0.6, 0.8])


def test_an_empty_round_releases_a_centred_count_that_leaves_the_median_bound_alone():
    clip = AdaptiveClip(0.7, target_quantile=0.5, learning_rate=0.2)  # no count noise
    assert clip.step(torch.zeros(0), expected_clients=10, generator=torch.Generator()) == pytest.approx(0.7)
    clip.step(torch.tensor([0.1, 0.2]), expected_clients=10, generator=torch.Generator())  # 2 of 10 below
    assert clip.bound == pytest.approx(0.7 * math.exp(-0.2 * 0.1))  # b̃ = (2 − 1)/10 + ½ = 0.6


def test_adaptive_clipping_settles_at_the_target_quantile():
    g = torch.Generator().manual_seed(0)
    clip = AdaptiveClip(0.05, target_quantile=0.3)
    for _ in range(400):
        clip.step(torch.rand(50, generator=g) * 2, expected_clients=50, generator=g)
    assert clip.bound == pytest.approx(0.6, abs=0.1)  # 30 % of Uniform(0, 2) lies below 0.6


def test_adaptive_clipping_spends_exactly_the_budget_of_one_gaussian_of_multiplier_z():
    """One client more moves (Σ clipped Δ / (z_Δ·C), centred count / σ_b) by at most 1/z: the round is
    one Gaussian mechanism of multiplier z (Andrew et al., Theorem 1), whatever the client's norm."""
    z, sigma_b, bound = 1.0, 0.75, 1.0
    z_updates = update_noise_multiplier(z, sigma_b)
    others = torch.tensor([0.3, 2.0, 0.9, 1.7])
    for norm in (0.2, 1.0, 5.0):  # below, at and above the bound
        moved_count = centred_count(torch.cat([others, torch.tensor([norm])]), bound) - centred_count(
            others, bound
        )
        moved_update = min(norm, bound)  # its clipped update, the only change to the noised sum
        joint = ((moved_update / (z_updates * bound)) ** 2 + (moved_count / sigma_b) ** 2) ** 0.5
        assert abs(moved_count) == 0.5
        assert joint <= 1 / z + 1e-12
    assert joint == pytest.approx(1 / z)  # tight for a clipped client
    with pytest.raises(ConfigError, match="count_stddev"):
        update_noise_multiplier(2.0, 0.5)


def _digits_settings(**dp) -> CrossDeviceSettings:
    return CrossDeviceSettings(rounds=3, sample_rate=0.2, local_lr=0.1, width=16, local_batch=5, dp=dp)


def _central_noise(**dp) -> tuple[torch.Tensor, object]:
    """The noise a central round added to the sum (50 clients, q 0.2: 10 expected), and the round."""
    released = run_federation(digit_population(50, 0.5, 0), _digits_settings(**dp), 0, capture=(0,)).captured[
        0
    ]
    noise = torch.cat([(released.aggregate[k] * 10 - released.updates[k].sum(0)).flatten()
                       for k in released.aggregate])  # fmt: skip
    return noise, released


@pytest.mark.parametrize("z", [0.5, 2.0])
def test_central_noise_has_std_z_s_over_the_expected_count(z):
    noise, released = _central_noise(mode="central", noise_multiplier=z, clip=0.3)
    expected = 0.2 * 50
    assert noise.std().item() == pytest.approx(z * 0.3, rel=0.05)
    assert released.aggregate_noise_std == pytest.approx(z * 0.3 / expected)


def _first_round_and_raw_updates(**dp) -> tuple[object, object, dict]:
    """Round 0 of a 50-client digits federation, and its sampled clients' updates before any defense."""
    pop = digit_population(50, 0.5, 0)
    released = run_federation(pop, _digits_settings(**dp), 0, capture=(0,)).captured[0]
    raw = local_updates(released.model, pop, released.clients, _digits_settings(mode="none"),
                        torch.Generator().manual_seed(0))  # fmt: skip
    return pop, released, raw


def test_local_noise_has_std_z_s_on_each_update():
    pop, released, clean = _first_round_and_raw_updates(mode="local", noise_multiplier=1.0, clip=0.3)
    # the pixels that are 0 in every image of a client get no first-layer update: pure noise there
    unused = (pop.x[released.clients] * pop.valid[released.clients].unsqueeze(-1)).abs().sum(1) == 0
    noise = released.updates["hidden.weight"].transpose(1, 2)[unused]
    assert clean["hidden.weight"].transpose(1, 2)[unused].abs().max() == 0
    assert noise.std().item() == pytest.approx(0.3, rel=0.08)


def test_local_noise_is_accounted_per_release_without_add_remove():
    pop = digit_population(40, 0.5, 0)
    eps = run_federation(pop, _digits_settings(mode="local", noise_multiplier=1.0, clip=0.3), 0).epsilon
    assert eps["add-remove"] is None  # the server sees who sent
    assert 0 < eps["zero-out"] < eps["replace-one"] < math.inf
    central = run_federation(pop, _digits_settings(mode="central", noise_multiplier=1.0, clip=0.3), 0).epsilon
    assert central["add-remove"] < central["replace-one"] and "zero-out" not in central


def test_federation_is_deterministic_and_refuses_bad_settings():
    pop = digit_population(40, 0.5, 0)
    settings = _digits_settings(mode="central", noise_multiplier=1.0, clip=0.3)
    a, b = run_federation(pop, settings, 3), run_federation(pop, settings, 3)
    assert a.accuracy == b.accuracy and a.clip == b.clip
    with pytest.raises(ValueError, match="adaptive"):
        CrossDeviceSettings(dp={"mode": "local", "adaptive": True})
    with pytest.raises(ValueError, match="sample_rate"):
        CrossDeviceSettings(sample_rate=0)
    with pytest.raises(ValueError, match="local_lr"):
        CrossDeviceSettings(local_lr=math.inf)
    with pytest.raises(ConfigError, match="clients"):
        digit_population(1000)
    with pytest.raises(ConfigError, match="alpha"):
        digit_population(40, math.inf)


def test_dp_fedavg_trains_digits_with_enough_clients_per_round_and_not_with_few():
    """McMahan et al.: noise on the mean shrinks with the clients per round. 150 clients, z 1, 150
    rounds: 45 per round trains near the undefended model; 7.5 per round does not."""
    pop = digit_population(150, 0.5, 0)

    def acc(q: float, mode: str) -> float:
        dp = (
            {"mode": mode, "noise_multiplier": 1.0, "clip": 0.1, "adaptive": True}
            if mode != "none"
            else {"mode": "none"}
        )
        settings = CrossDeviceSettings(rounds=150, sample_rate=q, local_lr=0.1, width=32, local_batch=5,
                                       local_epochs=2, eval_every=150, dp=dp)  # fmt: skip
        return run_federation(pop, settings, 0).final_accuracy

    plain, many, few = acc(0.3, "none"), acc(0.3, "central"), acc(0.05, "central")
    assert plain > 0.9
    assert many > plain - 0.1
    assert few < many - 0.2


def test_word_set_reader_and_scores():
    update = torch.zeros(10, 3)
    update[[5, 7, 2]] = 1.0  # 2 is a special ([CLS]): never a word
    assert read_words(update, 0.0, 0) == {5, 7}
    noisy = update + 0.01 * torch.randn(10, 3, generator=torch.Generator().manual_seed(0))
    assert read_words(noisy, 0.01, 2) == {5, 7}
    assert f1({5, 7}, {5, 7}) == 1 and f1({5}, {7}) == 0 and f1(set(), set()) == 1
    assert prior_guess(torch.tensor([9, 9, 9, 9, 1, 5, 3]), 2) == {5, 6}


def test_server_reads_every_word_of_a_clipped_update_and_local_noise_hides_them(rotten_tomatoes_csv):
    pytest.importorskip("tokenizers")
    from leakshield.crossdevice.population import movie_population

    pop = movie_population(rotten_tomatoes_csv)
    assert pop.clients == 301 and int(pop.sizes().sum()) == 7618
    base = {"rounds": 1, "local_lr": 1.0, "width": 4, "local_epochs": 2}
    central_dp = CrossDeviceSettings(**base, dp={"mode": "central", "clip": 0.1})
    central = run_federation(pop, central_dp, 0, capture=(0,)).captured[0]
    leaks = {w.observer: w for w in word_leakage(pop, central)}
    assert leaks["server"].score == 1.0  # clipping scales rows, it does not hide them
    assert (
        leaks["global-model observer"].score < leaks["global-model observer"].reference
    )  # 15 clients' union, noised
    local_dp = CrossDeviceSettings(**base, dp={"mode": "local", "noise_multiplier": 1.0, "clip": 0.1})
    local = run_federation(pop, local_dp, 0, capture=(0,)).captured[0]
    noisy = {w.observer: w for w in word_leakage(pop, local)}
    assert noisy["server"].score < noisy["server"].reference - 0.2


def test_command_runs_keeps_each_seed_and_resumes(tmp_path, capsys, monkeypatch):
    from leakshield import cli_crossdevice
    from leakshield.cli import main

    argv = ["cross-device", "--clients", "40", "--rounds", "4", "--sample-rate", "0.2", "--seeds", "2",
            "--noise-multiplier", "0.5", "--adaptive", "--out", str(tmp_path), "--quiet"]  # fmt: skip
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "40 clients" in out and "replace-one" in out and "test accuracy" in out
    assert sorted(p.name for p in tmp_path.iterdir()) == ["seed0.json", "seed1.json"]

    def refuse(*args, **kwargs):
        raise AssertionError("a kept seed was recomputed")

    monkeypatch.setattr(cli_crossdevice, "run_seed", refuse)
    assert main(argv) == 0
    assert capsys.readouterr().out == out
    changed = [a if a != "0.5" else "0.6" for a in argv]  # another z: the kept seeds do not apply
    with pytest.raises(AssertionError, match="recomputed"):
        main(changed)


@needs_dp_accounting
def test_command_accounts_fixed_size_sampling_under_replace_one(capsys):
    from leakshield.cli import main

    argv = ["cross-device", "--clients", "40", "--rounds", "3", "--sample-rate", "0.2", "--sampling", "fixed",
            "--quiet"]  # fmt: skip
    assert main(argv) == 0
    assert "replace-one" in (out := capsys.readouterr().out) and "replace-one only" in out


def test_fixed_size_without_dp_accounting_is_refused_before_any_training(capsys, monkeypatch):
    import sys

    from leakshield import cli_crossdevice
    from leakshield.cli import main

    monkeypatch.setitem(sys.modules, "dp_accounting", None)  # as if not installed

    def refuse(*args, **kwargs):
        raise AssertionError("trained before refusing")

    monkeypatch.setattr(cli_crossdevice, "run_seed", refuse)
    assert main(["cross-device", "--rounds", "2", "--sampling", "fixed", "--quiet"]) == 2
    err = capsys.readouterr().err
    assert "leakshield[dp]" in err and err.count("\n") == 1


def test_command_refuses_bad_input_in_one_line(capsys):
    from leakshield.cli import main

    for argv, word in (
        (["--sample-rate", "0"], "sample_rate"),
        (["--data", "text"], "--corpus"),
        (["--dp", "local", "--adaptive"], "adaptive"),
        (["--clients", "5000"], "clients"),
        (["--alpha", "inf"], "alpha"),
        (["--data", "text", "--clients", "10"], "--clients"),
    ):
        assert main(["cross-device", "--rounds", "1", "--quiet", *argv]) == 2
        err = capsys.readouterr().err
        assert word in err and err.count("\n") == 1 and "'cross-device" not in err, err


def test_command_on_text_reports_what_each_observer_reads(rotten_tomatoes_csv, capsys):
    pytest.importorskip("tokenizers")
    from leakshield.cli import main

    argv = ["cross-device", "--data", "text", "--corpus", str(rotten_tomatoes_csv), "--rounds", "2",
            "--dp", "local", "--noise-multiplier", "0.5", "--quiet", "--device", "cpu"]  # fmt: skip
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "Rotten Tomatoes by movie: 301 clients" in out and "read by the server at round 0" in out
    assert "add-remove" not in out and "zero-out" in out  # local noise: the server sees who sent
    assert "read by the global-model observer at round 1" in out


def test_a_first_layer_unit_returns_one_image_exactly():
    params = mlp_classifier(64, 10, hidden=8, seed=0)
    x = torch.rand(1, 64, generator=torch.Generator().manual_seed(1))
    grads = torch.func.grad(lambda p: torch.nn.functional.cross_entropy(mlp_logits(p, x), torch.tensor([3])))(
        params
    )
    images = unit_images(grads)
    assert len(images) >= 1 and best_psnr(x, images) > 60
    assert best_psnr(x, torch.empty(0, 64)) == 0.0


def test_the_server_sees_clipped_images_and_local_noise_hides_them():
    pop = digit_population(150, 0.5, 0)
    base = {"rounds": 1, "sample_rate": 0.1, "local_lr": 0.1, "width": 32, "local_batch": 5}
    central = run_federation(
        pop, CrossDeviceSettings(**base, dp={"mode": "central", "clip": 0.1}), 0, capture=(0,)
    )
    leaks = {w.observer: w for w in image_leakage(pop, central.captured[0])}
    assert leaks["server"].score > 40 > leaks["server"].reference + 20  # clipping changes no ratio
    assert leaks["global-model observer"].score < leaks["server"].score - 20
    local_dp = {"mode": "local", "noise_multiplier": 1.0, "clip": 0.1}
    local = run_federation(pop, CrossDeviceSettings(**base, dp=local_dp), 0, capture=(0,))
    noisy = {w.observer: w for w in image_leakage(pop, local.captured[0])}
    assert noisy["server"].score < noisy["server"].reference + 1


def test_the_server_receives_updates_clipped_to_the_bound():
    _, released, raw = _first_round_and_raw_updates(mode="central", noise_multiplier=0.0, clip=0.01)
    assert update_norms(raw).min() > 0.01  # every raw update is above the bound here,
    assert update_norms(released.updates).tolist() == pytest.approx([0.01] * len(released.clients))


def test_adaptive_clipping_noises_the_sum_with_the_updates_share_of_the_budget():
    # σ_b defaults to max(m̄/20, z) = 1: z_Δ = (1 − 1/4)^(−1/2) ≈ 1.155
    noise, _ = _central_noise(mode="central", noise_multiplier=1.0, clip=0.3, adaptive=True)
    # 1,210 noise draws: the std's standard error is 2 %; z instead of z_Δ would be 13 % off
    assert noise.std().item() == pytest.approx(update_noise_multiplier(1.0, 1.0) * 0.3, rel=0.06)
