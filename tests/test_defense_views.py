"""Every registered defense changes what the server sees, in the way it claims: one client computes its
FedSGD update on the same two private digits with and without the defense, through the runner's own
:func:`~leakshield.fl.observation.observe_victim`, and the two views are compared by the defense's claim
(the noise's scale, the clipped norm, the pruned share, the transformed inputs…). A defense registered
without a claim here fails the completeness test."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import pytest
import torch
from torch import nn

from leakshield.artifacts import ArtifactCache, FitData
from leakshield.defenses import DEFENSES, DefensePipeline, create_defense
from leakshield.defenses.dropout import ActiveDropout
from leakshield.experiment.config import Component
from leakshield.experiment.federation import build_model
from leakshield.fl import HonestClient, LocalTraining, ThreatModel, observe_victim

CPU = torch.device("cpu")
TANH_LENET = {"activation": "tanh", "init_range": None}
POOL, BATCH = 30, [3, 11]


@dataclass
class Seen:
    """The server's view of one update, and the client's private trace (the evaluator's)."""

    delta: dict[str, torch.Tensor]
    model: nn.Module
    x: torch.Tensor  # the private batch
    defended_x: torch.Tensor | None

    def flat(self) -> torch.Tensor:
        return torch.cat([v.flatten() for v in self.delta.values()])


def observe(digits3, name: str | None, params: dict, tmp_path) -> Seen:
    info, pool = digits3.info, digits3.train.subset(list(range(POOL)))
    pipeline = DefensePipeline([create_defense(name, params)] if name else [])
    net = build_model(Component(name="lenet", **TANH_LENET), pipeline, info, 0, "cpu").eval()
    for index, defense in enumerate(pipeline.defenses):
        if defense.fit_scope is not None:  # fit as the runner does: the public split or the client's data
            data = digits3.public if defense.fit_scope == "public" else pool
            fitted = defense.fit(
                FitData(info, data, net, 0, CPU, cache=ArtifactCache(tmp_path), public=digits3.public)
            )
            scope = {index: fitted} if defense.fit_scope == "public" else {}
            pipeline = pipeline.with_artifacts(scope, {} if scope else {(0, index): fitted})
    client = HonestClient(0, pool, LocalTraining(), pipeline, info, public=digits3.public, model_mode="eval")
    batch = pool.subset(BATCH)
    seen = observe_victim(
        [net], batch, client, threat=ThreatModel(True), generators=[torch.Generator().manual_seed(5)]
    )
    (view,) = seen.views
    return Seen(view.update.delta, view.model, batch.x, seen.trace.defended_x)  # fmt: skip


def _unchanged(clean: Seen, defended: Seen, params: dict) -> None:
    assert torch.equal(defended.flat(), clean.flat())


def _gaussian(clean: Seen, defended: Seen, params: dict) -> None:
    noise = defended.flat() - clean.flat()  # ≈ 62,000 entries: the std is within 2 % of σ
    assert noise.std().item() == pytest.approx(params["sigma"], rel=0.02)
    assert abs(noise.mean()) < 0.01 * params["sigma"]


def _laplace(clean: Seen, defended: Seen, params: dict) -> None:
    noise = defended.flat() - clean.flat()  # Laplace(0, b): E|n| = b, std = b·√2
    assert noise.abs().mean().item() == pytest.approx(params["scale"], rel=0.02)
    assert noise.std().item() == pytest.approx(params["scale"] * 2**0.5, rel=0.03)


def _clipped(clean: Seen, defended: Seen, params: dict) -> None:
    assert clean.flat().norm() > params["bound"]  # the case where clipping must act
    assert defended.flat().norm().item() == pytest.approx(params["bound"], rel=1e-5)
    assert torch.cosine_similarity(defended.flat(), clean.flat(), dim=0) > 1 - 1e-6  # the direction kept


def _pruned(clean: Seen, defended: Seen, params: dict) -> None:
    for key, value in defended.delta.items():
        kept = value != 0
        assert 1 - kept.float().mean().item() >= params["ratio"] - 1 / value.numel()
        assert torch.equal(value[kept], clean.delta[key][kept])  # survivors untouched
        if kept.any() and (~kept).any():  # the largest in magnitude survive
            assert clean.delta[key][~kept].abs().max() <= clean.delta[key][kept].abs().min()


def _fp16(clean: Seen, defended: Seen, params: dict) -> None:
    assert torch.equal(defended.flat(), clean.flat().half().float())
    assert not torch.equal(defended.flat(), clean.flat())


def _soteria(clean: Seen, defended: Seen, params: dict) -> None:
    classifier = [n for n, m in clean.model.named_modules() if isinstance(m, nn.Linear)][-1] + ".weight"
    changed = [k for k in clean.delta if not torch.equal(clean.delta[k], defended.delta[k])]
    assert changed == [classifier]  # the defended layer only
    weight = defended.delta[classifier]
    zero_columns = (weight == 0).all(dim=0).float().mean().item()  # the pruned features' columns
    assert zero_columns == pytest.approx(params["percentile"] / 100, abs=0.02)


def _per_sample_noise(clean: Seen, defended: Seen, params: dict) -> None:
    """The mean of per-sample clipped gradients plus N(0, (σC)²)/B: the noise dwarfs the clipping here."""
    difference = defended.flat() - clean.flat()
    assert difference.std().item() == pytest.approx(1.1 * 1.0 / len(BATCH), rel=0.02)


def _signed_mixtures(clean: Seen, defended: Seen, params: dict) -> None:
    """InstaHide: mixtures with random pixel signs (in normalized units), so x' leaves [0, 1]."""
    _inputs_replaced(clean, defended, params)
    outside = (defended.defended_x < 0) | (defended.defended_x > 1)
    assert outside.float().mean() > 0.02  # 9.5 % here; a plain mixture of images stays inside


def _dropout(clean: Seen, defended: Seen, params: dict) -> None:
    assert any(isinstance(m, ActiveDropout) for m in defended.model.modules())
    assert not torch.equal(defended.flat(), clean.flat())


def _bottleneck(clean: Seen, defended: Seen, params: dict) -> None:
    extra = set(defended.delta) - set(clean.delta)  # the variational bottleneck's parameters are shared too
    assert extra and all(defended.delta[k].abs().sum() > 0 for k in extra)


def _inputs_replaced(clean: Seen, defended: Seen, params: dict) -> None:
    """Trains on other images than the private ones (mixed, obscured, generated or condensed)."""
    assert not torch.equal(defended.flat(), clean.flat())
    if defended.defended_x is not None:
        assert (defended.defended_x - clean.x).abs().amax(dim=(1, 2, 3)).min() > 0.05


def _shifted_border(clean: Seen, defended: Seen, params: dict) -> None:
    """ATS policy 3 (translateX by 14.5 px, nearest): 15 black columns on one side of every image."""
    shifted = defended.defended_x
    assert not torch.equal(shifted, clean.x)
    for i, image in enumerate(shifted):  # the content moved 15 columns left or right, black filling in
        left = _close(image[..., :-15], clean.x[i, ..., 15:]) and (image[..., -15:] == 0).all()
        right = _close(image[..., 15:], clean.x[i, ..., :-15]) and (image[..., :15] == 0).all()
        assert left or right


def _close(a: torch.Tensor, b: torch.Tensor) -> bool:
    return bool((a - b).abs().max() <= 1 / 255 + 1e-6)  # the policy runs on 8-bit images


def _crop_or_flip(clean: Seen, defended: Seen, params: dict) -> None:
    """Each x' is x zero-padded by 4, cropped at some offset and maybe flipped — nothing else."""
    padded = torch.nn.functional.pad(clean.x, (4, 4, 4, 4))
    size = clean.x.shape[-1]
    assert not torch.equal(defended.defended_x, clean.x)
    for i, image in enumerate(defended.defended_x):
        crops = [padded[i, :, a : a + size, b : b + size] for a in range(9) for b in range(9)]
        assert any(torch.equal(image, c) or torch.equal(image, c.flip(-1)) for c in crops)


def _sensitive_concealed(clean: Seen, defended: Seen, params: dict) -> None:
    """DCS²: the update is no longer the private batch's gradient (a concealing sample's is mixed in)."""
    assert (defended.flat() - clean.flat()).norm() > 0.05 * clean.flat().norm()


GAN = {"cgan_steps": 4, "finetune_steps": 2, "batch_size": 8, "width": 8, "checkpoint_every": 2,
       "extractor_epochs": 1}  # fmt: skip
WGAN = {"ipc": 2, "shards": 5, "pretrain_steps": 1, "max_steps": 2, "width": 8, "critic_widths": [8]}
#: started from noise: from real images (the default) two iterations leave a victim's own image in the set
CONDENSED = {"ipc": 2, "iterations": 2, "width": 8, "init": "noise"}
Claim = Callable[[Seen, Seen, dict], None]


def _orthogonal(clean: Seen, defended: Seen, params: dict) -> None:
    """CENSOR: every tensor orthogonal to the true one, with its norm."""
    for key, true in clean.delta.items():
        released = defended.delta[key]
        assert abs(torch.cosine_similarity(released.flatten(), true.flatten(), dim=0)) < 1e-5, key
        assert released.norm().item() == pytest.approx(true.norm().item(), rel=1e-5), key


def _clipped_then_noised(clean: Seen, defended: Seen, params: dict) -> None:
    """DP-FedAvg, local: the update clipped to S plus N(0, (σ·S)²) per entry (≈ 62,000 entries: 2 %)."""
    bound, sigma = params["clip"], params["noise_multiplier"]
    assert clean.flat().norm() > bound  # the case where clipping must act
    noise = defended.flat() - clean.flat() * (bound / clean.flat().norm())
    assert noise.std().item() == pytest.approx(sigma * bound, rel=0.02)


CLAIMS: dict[str, tuple[dict, Claim]] = {
    "none": ({}, _unchanged),
    "row-guard": ({}, _unchanged),  # an honest model passes and the update is untouched
    "loss-guard": ({}, _unchanged),  # the same, and reading the client's data leaves its draws alone
    "dominance-guard": ({}, _unchanged),
    "drift-guard": ({}, _unchanged),
    "gaussian-noise": ({"sigma": 0.01}, _gaussian),
    "laplacian-noise": ({"scale": 0.01}, _laplace),
    "clipping": ({"bound": 0.01}, _clipped),
    "pruning": ({"ratio": 0.9}, _pruned),
    "quantization": ({}, _fp16),
    "soteria": ({"percentile": 60.0}, _soteria),
    "dp-sgd": ({}, _per_sample_noise),
    "dp-fedavg": ({"mode": "local", "clip": 0.01, "noise_multiplier": 0.5}, _clipped_then_noised),
    "censor": ({"candidates": 3}, _orthogonal),
    "dropout": ({}, _dropout),
    "precode": ({}, _bottleneck),
    "mixup": ({}, _inputs_replaced),
    "instahide": ({}, _signed_mixtures),
    "ats": ({"policies": "3"}, _shifted_border),
    "augmentation": ({"padding_pixels": 4}, _crop_or_flip),
    "loda": ({"steps": 5, "epochs": 1}, _inputs_replaced),
    "antigan": (GAN, _inputs_replaced),
    "dcs2": ({"sensitive": "all", "steps": 3}, _sensitive_concealed),
    "dc": ({**CONDENSED, "outer_loop": 1, "inner_loop": 1}, _inputs_replaced),
    "dsa": ({**CONDENSED, "outer_loop": 1, "inner_loop": 1}, _inputs_replaced),
    "dm": (CONDENSED, _inputs_replaced),
    "dp-merf": ({"ipc": 2, "steps": 5, "features": 100}, _inputs_replaced),
    "gs-wgan": (WGAN, _inputs_replaced),
}  # fmt: skip


def test_every_registered_defense_has_a_claim_here():
    assert sorted(CLAIMS) == sorted(DEFENSES.names())


@pytest.fixture
def clean(digits3, tmp_path_factory):
    """Per test, so that both views are computed at the test's thread count (a module fixture would run
    before the per-test thread setting, at whatever count the previous test left)."""
    return observe(digits3, None, {}, tmp_path_factory.mktemp("clean"))


@pytest.mark.parametrize("name", sorted(CLAIMS))
def test_the_defense_changes_what_the_server_sees_as_it_claims(digits3, clean, name, tmp_path):
    params, claim = CLAIMS[name]
    claim(clean, observe(digits3, name, params, tmp_path), params)


def test_the_claims_fail_on_the_undefended_view(digits3, clean, tmp_path):
    """The checks are not vacuous: the plain update fails each claim a defense must make."""
    for params, claim in CLAIMS.values():
        if claim is _unchanged:
            continue
        with pytest.raises(AssertionError):
            claim(clean, clean, params)
