"""CENSOR (Zhang et al., NDSS 2025) and its adaptive attack: the release is orthogonal to the gradient
tensor by tensor with its norms, the lowest-loss candidate is kept, the fallback does what it says, IG
recovers nothing on real digits, the finding that an orthogonal release does not train, and the two
protocols: the authors' (clean training, CENSOR on the attacked batch only) and every step."""

from __future__ import annotations

import dataclasses
import math

import pytest
import torch
from torch import nn

from leakshield.attacks.adaptive.censor import orthogonality_distance
from leakshield.attacks.passive.inversion.objectives import cosine_distance
from leakshield.data import IIDPartition, load_dataset, partition_indices
from leakshield.defenses import create_defense
from leakshield.defenses.base import ClientContext, DefensePipeline
from leakshield.defenses.censor import CensorParams, batch_loss, censor_gradient, orthogonal_direction
from leakshield.experiment.probe import probe_attack
from leakshield.fl import FederatedSimulation, FLConfig, LocalTraining, compute_update
from leakshield.gradients import plain_gradient
from leakshield.metrics import accuracy


def _tiny(seed: int = 0) -> tuple[nn.Module, torch.Tensor, torch.Tensor]:
    torch.manual_seed(seed)
    model = nn.Sequential(nn.Flatten(), nn.Linear(12, 7), nn.Tanh(), nn.Linear(7, 3))
    return model, torch.randn(4, 1, 3, 4), torch.tensor([0, 1, 2, 1])


def _cosine(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a.double() * b.double()).sum() / (a.double().norm() * b.double().norm()))


def test_release_is_orthogonal_to_the_gradient_in_every_tensor_with_its_norm() -> None:
    model, x, y = _tiny()
    g = plain_gradient(model, x, y)
    released, _ = censor_gradient(
        model, x, y, g, CensorParams(candidates=5), torch.Generator().manual_seed(1)
    )
    for name, true in g.items():
        assert abs(_cosine(released[name], true)) < 1e-6, name
        assert released[name].norm() == pytest.approx(float(true.norm()), rel=1e-5), name
    # the authors' projection divides by ||g|| instead of ||g||²: not orthogonal unless ||g|| = 1
    reference = [orthogonal_direction(v, torch.Generator().manual_seed(2), "reference") for v in g.values()]
    assert max(abs(_cosine(r, v)) for r, v in zip(reference, g.values(), strict=True)) > 1e-3


def test_the_kept_candidate_is_the_one_with_the_lowest_loss_one_step_along_it() -> None:
    model, x, y = _tiny(3)
    g = plain_gradient(model, x, y)
    params = CensorParams(candidates=6, eta=0.5)  # a step large enough to separate the candidates
    released, fell_back = censor_gradient(model, x, y, g, params, torch.Generator().manual_seed(4))
    replay = torch.Generator().manual_seed(4)
    weights = {k: v.detach().double() for k, v in model.named_parameters()}
    scored = model.double()
    losses = []
    for _ in range(params.candidates):
        candidate = {k: orthogonal_direction(v, replay) for k, v in g.items()}
        stepped = {k: w - params.eta * candidate[k].double() for k, w in weights.items()}
        losses.append((batch_loss(scored, stepped, x.double(), y), candidate))
    best_loss, best = min(losses, key=lambda pair: pair[0])
    assert max(loss for loss, _ in losses) > best_loss + 1e-4  # the choice matters
    for name in g:
        torch.testing.assert_close(released[name], best[name].float())
    assert not fell_back


def test_the_fallback_releases_the_true_gradient_only_when_asked() -> None:
    """A step of η = 100 along any candidate raises the loss: the fallback fires."""
    model, x, y = _tiny(5)
    g = plain_gradient(model, x, y)
    original, fired = censor_gradient(
        model,
        x,
        y,
        g,
        CensorParams(candidates=3, eta=100.0, fallback="original"),
        torch.Generator().manual_seed(0),
    )
    assert fired
    for name in g:
        torch.testing.assert_close(original[name], g[name])
    best, fired = censor_gradient(
        model, x, y, g, CensorParams(candidates=3, eta=100.0), torch.Generator().manual_seed(0)
    )
    assert fired and all(abs(_cosine(best[k], g[k])) < 1e-6 for k in g)


def test_the_stage_records_the_fallback_and_stops_after_until_round() -> None:
    model, x, y = _tiny()
    digits = load_dataset("digits", {"size": 8})
    defense = create_defense("censor", {"candidates": 2, "until_round": 2})
    context = ClientContext(
        client_id=0, round=1, dataset=digits.train, info=digits.info, generator=torch.Generator()
    )
    plain = plain_gradient(model, x, y)["1.weight"]
    defended = defense.gradient(model, x, y, context)
    assert "censor_fallback" in context.notes
    assert abs(_cosine(defended["1.weight"], plain)) < 1e-6
    later = dataclasses.replace(context, round=2)
    torch.testing.assert_close(defense.gradient(model, x, y, later)["1.weight"], plain)


def test_orthogonality_distance_is_zero_at_the_truth_and_sees_the_norms() -> None:
    model, x, y = _tiny()
    g = list(plain_gradient(model, x, y).values())
    generator = torch.Generator().manual_seed(0)
    release = [orthogonal_direction(v, generator) for v in g]
    assert float(orthogonality_distance(g, release)) < 1e-10
    # orthogonal but twice the norm in every tensor: the norm term alone, (log 2)² per tensor
    assert float(orthogonality_distance([2 * v for v in g], release)) == pytest.approx(
        math.log(2) ** 2, rel=1e-4
    )
    other = list(plain_gradient(model, torch.randn_like(x), y).values())
    assert float(orthogonality_distance(other, release)) > 1e-3
    assert float(cosine_distance(g, release)) == pytest.approx(1.0, abs=1e-3)  # what IG sees: nothing


TANH = {"activation": "tanh", "init_range": None}


def test_censor_aware_takes_a_fallback_release_for_what_it_is(digits3) -> None:
    """With one candidate the orthogonal step raises the loss (positive curvature; measured: 6 of 6 draws
    over victims 0 and 7 at η 1e-4 and 1), so the fallback fires for every victim: under
    ``fallback: original`` the client releases its true gradient and the adaptive attack, seeing that
    configuration, recovers the images (plain IG's cosine ends below FALLBACK_MATCH); under ``best`` the
    release stays orthogonal and it recovers nothing (500 steps, victims 0 and 7)."""
    original = [("censor", {"candidates": 1, "fallback": "original"})]
    caught = probe_attack(digits3, original, "censor-aware", {"iterations": 500}, model_params=TANH)
    hidden = probe_attack(
        digits3, [("censor", {"candidates": 1})], "censor-aware", {"iterations": 500}, model_params=TANH
    )
    assert caught.ssim > 0.9
    assert hidden.ssim < 0.2


def test_ig_recovers_nothing_from_censor_on_real_digits(digits3) -> None:
    """IG (500 steps, labels known) on an untrained tanh LeNet: 0.994 SSIM without a defense, −0.013
    under CENSOR (victims 0 and 7, measured); the thresholds leave wide margins on both."""
    plain = probe_attack(digits3, [("none", {})], "ig", {"iterations": 500}, model_params=TANH)
    defended = probe_attack(digits3, [("censor", {})], "ig", {"iterations": 500}, model_params=TANH)
    assert plain.ssim > 0.9
    assert defended.ssim < 0.2


def test_an_orthogonal_release_does_not_train_where_the_plain_gradient_does() -> None:
    """The finding behind the docs: 60 SGD steps (lr 0.5, batch 32) of a small MLP on 8×8 digits reach
    ≥ 0.6 test accuracy on plain gradients and stay near chance (0.1) on CENSOR's releases."""
    data = load_dataset("digits", {"size": 8})
    norm = data.info.normalize

    def train(defended: bool) -> float:
        torch.manual_seed(0)
        model = nn.Sequential(nn.Flatten(), nn.Linear(64, 32), nn.Tanh(), nn.Linear(32, 10))
        draw = torch.Generator().manual_seed(0)
        for _ in range(60):
            rows = torch.randint(len(data.train), (32,), generator=draw)
            x, y = norm(data.train.x[rows]), data.train.y[rows]
            g = plain_gradient(model, x, y)
            if defended:
                g, _ = censor_gradient(model, x, y, g, CensorParams(candidates=5), draw)
            with torch.no_grad():
                for name, p in model.named_parameters():
                    p -= 0.5 * g[name]
        with torch.no_grad():
            return float((model(norm(data.test.x)).argmax(1) == data.test.y).float().mean())

    plain, censored = train(False), train(True)
    assert plain >= 0.6
    assert censored < 0.25, (plain, censored)


def test_the_authors_protocol_trains_clean_where_releasing_every_step_does_not() -> None:
    """CENSOR's two protocols in a FedAvg federation (4 IID clients, 10 rounds, an MLP 64-32-10 on 8×8
    digits, lr 0.5, batch 32, T 5). ``protocol: authors`` (their run_rec.py) trains on clean gradients:
    the model stays within 2 points of the undefended one (measured: identical, 0.953–0.967 over seeds
    0–4) while the batch an attack observes, handed in from outside, still gets an orthogonal release.
    ``every-step`` trains on the releases and stays near chance (measured 0.022–0.192 over seeds 0–4)."""
    data = load_dataset("digits", {"size": 8})
    config = FLConfig(clients=4, local=LocalTraining(algorithm="fedavg", local_lr=0.5, batch_size=32))
    clients = [data.train.subset(p) for p in partition_indices(data.train.y, 4, IIDPartition(), seed=0)]

    def trained(protocol: str | None) -> tuple[nn.Module, DefensePipeline]:
        torch.manual_seed(0)
        model = nn.Sequential(nn.Flatten(), nn.Linear(64, 32), nn.Tanh(), nn.Linear(32, 10))
        params = {"candidates": 5, "protocol": protocol}
        pipeline = DefensePipeline([create_defense("censor", params)] if protocol else [])
        FederatedSimulation.honest(model, clients, config, pipeline, data.info, seed=0).run(10)
        return model, pipeline

    def accuracy_of(model: nn.Module) -> float:
        return accuracy(model, data.test, normalize=data.info.normalize)

    plain = accuracy_of(trained(None)[0])
    model, authors = trained("authors")
    assert abs(accuracy_of(model) - plain) <= 0.02, (accuracy_of(model), plain)
    victim = data.test.subset(torch.arange(2))
    update, _ = compute_update(
        model, victim, LocalTraining(), authors, info=data.info, generator=torch.Generator().manual_seed(0)
    )
    true = plain_gradient(model, data.info.normalize(victim.x), victim.y)
    assert max(abs(_cosine(update.gradient()[k], true[k])) for k in true) < 1e-6  # the observed release
    every_step = accuracy_of(trained("every-step")[0])
    assert plain - every_step > 0.02 and every_step < 0.3, (plain, every_step)


def test_censor_aware_runs_plain_ig_once_the_defended_rounds_are_over(monkeypatch) -> None:
    """From ``until_round`` on the client releases its plain gradient: the adaptive attack matches it
    with IG's cosine instead of asking for orthogonality."""
    from types import SimpleNamespace

    from leakshield.attacks import create_attack
    from leakshield.attacks.base import Reconstruction
    from leakshield.attacks.passive.inversion.engine import GradientInversion
    from leakshield.defenses.base import PublicDefense

    used: list[str] = []

    def fake(self, view, *, seed=0):  # type: ignore[no-untyped-def]
        used.append("orthogonality" if type(self).__name__ == "CensorAware" else self.params.distance)
        return Reconstruction(torch.zeros(1, 1, 2, 2), stats={"grad_distance": 0.5})

    monkeypatch.setattr(GradientInversion, "reconstruct", fake)
    attack = create_attack("censor-aware", {"iterations": 1})
    public = (PublicDefense("censor", CensorParams(until_round=2)),)
    attack.reconstruct(SimpleNamespace(defenses=public, round=1), seed=0)
    attack.reconstruct(SimpleNamespace(defenses=public, round=2), seed=0)
    assert used == ["orthogonality", "cosine"]
