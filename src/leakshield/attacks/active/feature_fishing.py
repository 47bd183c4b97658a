"""Feature fishing (Wen et al., *Fishing for User Data in Large-Batch Federated Learning via Gradient
Magnification*, ICML 2022): class fishing's classifier, with the target class's logit made a steep
function of one feature, so that of all the samples of a batch or an aggregate only those on one side
of a cut send a gradient below the classifier — ideally one.

The server keeps every other class at bias B = 1000 with zero weights and sets the target row to
z_c = m·(h_f − τ) + B + log(C − 1), so that p_c = σ(m·(h_f − τ)) for every input. The gradient reaching
the layers below from a sample is then (p_c − 1[y = c])·m·∇h_f: a sample of the target class speaks
when its feature lies below the cut τ, a sample of another class when its feature lies above it, and
every other sample is silent (a feature that is exactly zero — a ReLU that did not fire — is silent
too). This is the paper's single-query protocol with the feature's distribution estimated from data
the server holds (breaching's ``feature estimation``; the public split here). The server picks the
feature f and the cut τ that maximize the chance that exactly one sample speaks, estimated from the
public split for an aggregate of ``aggregate_size`` samples: with λ_t the expected number of target
samples below the cut and λ_o of other samples above it, P = λ_t·e^(−λ_t)·e^(−λ_o) (Poisson; smoothed
empirical distributions; a cut must have one public sample of the class below it, so that the kernels'
tails alone never justify it — with too small a public split for the aggregate the estimate then says
so, e.g. 0.04 for 800 samples from 288 public digits). The paper's multi-query binary search over τ is
not implemented: the observation protocol hands each round's model to the victim without the previous
round's answer.

One sample's gradient is then decoded exactly when the model's first layer is fully connected on the
image (x = Σ_k ∇b_k·∇W_k / Σ_k ∇b_k², the analytic attack's ratio over every row); other models are
inverted as class fishing inverts them (IG-style, cosine distance, the classifier's own gradient left
out). The rest of the batch is the public split's mean image.

Parameters: ``target_class``; ``aggregate_size``: the number of samples the server expects in the
update it attacks (the protocol's clients × batch); ``sharpness``: the logit's slope m in units of the
feature's public standard deviation (300: a sample a twentieth of a deviation from the cut weighs
e^(−15)); ``feature``: fix the fished feature instead of choosing it; the inversion's parameters.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

import pydantic
import torch
from torch import nn

from leakshield.attacks.active.fishing import (
    NON_TARGET_BIAS,
    FishingAttack,
    FishingParams,
    FishingSecrets,
    classifier_layer,
)
from leakshield.attacks.active.trap_weights import check_image_fed_linear, first_image_layer
from leakshield.attacks.base import ATTACKS, Reconstruction
from leakshield.data.types import DatasetInfo
from leakshield.errors import ConfigError
from leakshield.fl.types import PreparedModel, ServerKnowledge, ServerView
from leakshield.threats import Adversary, Knowledge, threat


class FeatureFishingParams(FishingParams):
    """aggregate_size: samples in the attacked update. sharpness: the logit's slope per feature deviation.
    feature: the fished feature (default: chosen from the public split)."""

    aggregate_size: int = pydantic.Field(default=16, ge=1, description="samples the server expects")
    sharpness: float = pydantic.Field(default=300.0, gt=0, description="slope per public deviation")
    feature: int | None = pydantic.Field(default=None, ge=0, description="the fished feature")


@dataclass(frozen=True)
class FeatureCut:
    """The fished ``feature``, its ``cut`` τ and the logit's ``slope`` m, with the public split's
    estimates of the target samples below the cut, the other samples above it, and the chance that
    exactly one sample speaks."""

    feature: int
    cut: float
    slope: float
    expected_target: float
    expected_others: float
    chance: float


@dataclass(frozen=True)
class FeatureFishingSecrets(FishingSecrets):
    """Class fishing's secrets and the cut."""

    fished: FeatureCut


def classifier_inputs(model: nn.Module, layer: nn.Linear, x: torch.Tensor) -> torch.Tensor:
    """The features h that ``layer`` receives for normalized inputs ``x`` (N × F)."""
    seen: list[torch.Tensor] = []
    handle = layer.register_forward_hook(lambda _m, inputs, _o: seen.append(inputs[0].detach()))
    try:
        with torch.no_grad():
            model(x)
    finally:
        handle.remove()
    return seen[0].flatten(1).double()


def _share_speaking(h: torch.Tensor, cuts: torch.Tensor, below: bool) -> torch.Tensor:
    """Smoothed share of samples (rows of ``h``, N × F) whose nonzero feature lies below (or above)
    each cut (T × F). Gaussian kernels of Silverman's width per feature."""
    if len(h) == 0:
        return torch.zeros_like(cuts)
    spread = h.std(dim=0, unbiased=len(h) > 1).clamp_min(1e-6)
    width = 0.9 * spread * len(h) ** -0.2
    shares = []
    for f in torch.arange(h.shape[1]).split(64):  # T × N × 64 at a time
        lower = torch.special.ndtr((cuts[:, None, f] - h[None, :, f]) / width[f])  # share below each cut
        side = lower if below else 1 - lower
        shares.append((side * (h[:, f] != 0)[None]).mean(dim=1))
    return torch.cat(shares, dim=1)


def choose_cut(
    h: torch.Tensor, y: torch.Tensor, target: int, size: int, sharpness: float, feature: int | None = None
) -> FeatureCut:
    """The feature and cut that make one sample of an aggregate of ``size`` most likely to speak alone,
    estimated from the public features ``h`` (N × F) and labels ``y``."""
    mine, others = h[y == target], h[y != target]
    if len(mine) == 0:
        raise ValueError(f"target_class: the public split holds no sample of class {target}")
    share = len(mine) / len(h)
    columns = torch.arange(h.shape[1]) if feature is None else torch.tensor([feature])
    if feature is not None and feature >= h.shape[1]:
        raise ValueError(f"feature: {feature}; the classifier reads features 0 to {h.shape[1] - 1}")
    h, mine, others = h[:, columns], mine[:, columns], others[:, columns]
    cuts = torch.quantile(h, torch.linspace(0.0, 1.0, 65, dtype=h.dtype), dim=0)  # T × F
    cuts = (cuts[1:] + cuts[:-1]) / 2
    lam_t = size * share * _share_speaking(mine, cuts, below=True)
    lam_o = size * (1 - share) * _share_speaking(others, cuts, below=False)
    chance = lam_t * torch.exp(-lam_t - lam_o)
    chance[:, h.std(dim=0) == 0] = -1.0  # a constant feature cuts nothing
    # a cut needs one public sample of the class below it: the kernels' mass beyond the data is no sample
    lowest = torch.where(mine != 0, mine, torch.inf).min(dim=0).values
    chance[cuts <= lowest] = -1.0
    best = int(torch.argmax(chance))
    t, f = divmod(best, chance.shape[1])
    spread = float(h[:, f].std().clamp_min(1e-6))
    return FeatureCut(
        int(columns[f]), float(cuts[t, f]), sharpness / spread, float(lam_t[t, f]), float(lam_o[t, f]),
        float(chance[t, f]),
    )  # fmt: skip


def decode_one(view: ServerView, layer: str) -> torch.Tensor | None:
    """One sample's normalized input from the gradient of the fully connected ``layer`` it feeds
    (least squares over every row); None when the layer received no gradient (nobody spoke)."""
    gradient = view.update.gradient()
    grad_w, grad_b = gradient[f"{layer}.weight"].double(), gradient[f"{layer}.bias"].double()
    energy = grad_b @ grad_b
    if energy <= 1e-30:
        return None
    return ((grad_b @ grad_w) / energy).float().view(1, *view.data_info.shape).cpu()


def _image_layer(model: nn.Module, info: DatasetInfo) -> str | None:
    """The fully connected first layer with a bias that one sample's gradient decodes through, if any."""
    try:
        name, layer = first_image_layer(model, info, "feature-fishing")
    except ConfigError:
        return None
    return name if layer.bias is not None else None


@ATTACKS.register(
    "feature-fishing",
    summary="malicious server: feature fishing cuts one feature of the fished class's logit so that one "
    "sample of a large batch or an aggregate sends the gradient below the classifier",
    reference="Wen et al., Fishing for User Data in Large-Batch Federated Learning via Gradient "
    "Magnification, ICML 2022",
    params=FeatureFishingParams,
    threat=threat(
        Adversary.PARAMETER_SERVER, (Knowledge.PROTOCOL, Knowledge.PUBLIC_SPLIT), secure_aggregation=True
    ),
)
class FeatureFishingAttack(FishingAttack):
    """Needs FedSGD (or a one-step update) and a model ending in a linear classifier with a bias."""

    params: FeatureFishingParams

    def check_model(self, model: nn.Module, shape: tuple[int, int, int]) -> None:
        """Refuse, before a run, a model without a fully connected layer on the image (its feature cut)."""
        check_image_fed_linear(model, shape)

    def prepare_model(self, model: nn.Module, knowledge: ServerKnowledge) -> PreparedModel:
        prepared = super().prepare_model(model, knowledge)  # class fishing's classifier
        sent, secrets = prepared.model, prepared.secrets
        assert isinstance(secrets, FishingSecrets)
        info = knowledge.data_info
        _, layer = classifier_layer(sent, info)
        public = knowledge.public.to(next(sent.parameters()).device)
        h = classifier_inputs(sent, layer, info.normalize(public.x)).cpu()
        p = self.params
        cut = choose_cut(h, public.y.cpu(), p.target_class, p.aggregate_size, p.sharpness, p.feature)
        with torch.no_grad():
            layer.weight.zero_()
            layer.weight[p.target_class, cut.feature] = cut.slope
            offset = NON_TARGET_BIAS + math.log(info.num_classes - 1)
            layer.bias[p.target_class] = offset - cut.slope * cut.cut
        fished = FeatureFishingSecrets(secrets.image, secrets.target_class, secrets.weight, secrets.bias, cut)
        return PreparedModel(sent, fished)

    def reconstruct(self, view: ServerView, *, seed: int = 0) -> Reconstruction:
        secrets = view.secrets
        if not isinstance(secrets, FeatureFishingSecrets):
            raise ValueError("the feature-fishing attack needs the model it prepared (prepare_model)")
        layer = _image_layer(view.model, view.data_info)
        if layer is None:  # no fully connected first layer: invert as class fishing does
            return super().reconstruct(view, seed=seed)
        start = time.perf_counter()
        found = decode_one(view, layer)
        mean = secrets.image.float()[None]
        if found is None:
            images, spoke = mean.expand(view.batch_size, -1, -1, -1), 0.0
        else:
            one = view.data_info.denormalize(found).clamp(0, 1)
            images, spoke = torch.cat([one, mean.expand(view.batch_size - 1, -1, -1, -1)]), 1.0
        labels = torch.full((len(images),), secrets.target_class, dtype=torch.long)
        cut = secrets.fished
        stats = {"decoded": spoke, "feature": float(cut.feature), "chance": cut.chance,
                 "seconds": time.perf_counter() - start}  # fmt: skip
        return Reconstruction(images=images.contiguous(), labels=labels, stats=stats)
