"""DCS²: defense by concealing sensitive samples (Wu et al., *Concealing Sensitive Samples against
Gradient Leakage in Federated Learning*, AAAI 2024, Sec. 3.3, Eq. 9–12, Algorithm 1).

For every local minibatch that holds sensitive samples x_s the client

1. synthesizes concealed samples x̃_c (Eq. 9): gradients similar to x_s's, images far from x_s, logits
   close to x_s's:  min 1 − cos(∇θL(x̃_c, ỹ_c), ∇θL(x_s, y_s)) + exp(−λ_x·‖x̃_c − x_s‖)
   + λ_z·(‖f(x̃_c) − f(x_s)‖ / ‖f(x_s)‖ − ε), by Adam from a public sample (or noise, or a mix);
2. shares g_c = ∇θ[L(batch) + λ_g·L(x̃_c, ỹ_c) + (1 − λ_g)·L(x̃_c, y_s)] (Eq. 10);
3. projects g_c when it disagrees with the batch's own gradient g (Eq. 11–12): with one constraint the
   QP min_v ½‖g‖²v² + ⟨g_c, g⟩v, v ≥ 0 has the closed form v* = max(0, −⟨g_c, g⟩/‖g‖²), and
   g̃ = g_c + v*·g satisfies ⟨g̃, g⟩ ≥ 0.

Sensitive samples of one minibatch are concealed together (one synthesis of as many concealed samples,
with the gradient cosine over the group), as the reference code does.

Where the reference code differs from the paper it is an option: ``normalization: reference`` divides
the loss of Eq. 10 by d (3, or 2 when λ_g ∈ {0, 1}); ``margin: 0.5, ridge: 1e-3`` are the projection's
margin and ridge of the reference's GEM solver (v* = max(margin, −⟨g_c, g⟩/(‖g‖² + ridge))).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar, Literal

import pydantic
import torch
from torch import nn

from leakshield.artifacts import Artifact, FitData, FitScope
from leakshield.data.types import DatasetInfo, ImageSet
from leakshield.defenses.base import DEFENSES, ClientContext, Defense
from leakshield.defenses.convergence import METADATA_KEY, reference
from leakshield.errors import ConfigError
from leakshield.gradients import parameter_gradients
from leakshield.loss import cross_entropy, training_loss
from leakshield.metrics.sensitivity import SensitiveSamples, SensitivityRule
from leakshield.schedules import ig_step_schedule


class DCS2Params(SensitivityRule):
    """Which samples are sensitive: see :class:`~leakshield.metrics.sensitivity.SensitivityRule`
    (default: a seeded 10 % of each defended client's samples).

    Synthesis (Eq. 9) — lambda_x, lambda_z, epsilon: the weights and latent margin of Eq. 9. steps, lr:
    Adam steps and step size, decayed ×0.1 at 3/8, 5/8 and 7/8 of the steps. init: the start of x̃_c:
    ``public`` (a random public sample, ỹ_c its label), ``noise`` (N(0, 1) in normalized space, ỹ_c
    random) or ``mix`` (``mix_weight``·public + (1 − mix_weight)·x_s, ỹ_c the public label).
    mix_weight: the public sample's weight in ``mix``.
    stop_distance: stop early once the mean ‖x̃_c − x_s‖₂ (normalized space, the unit of Eq. 9's
    distance term; the reference code stops at 300–500) exceeds it (None: run all steps). boxed: keep
    x̃_c a valid image (clamped to the pixel range after every step; the paper does not say; without it
    the exp(−λ_x·distance) term drives x̃_c out of the image domain).

    Shared gradient — lambda_g: λ_g of Eq. 10 (the reference code's λ_y). normalization: ``paper``
    (Eq. 10 as written) or ``reference`` (divided by d). margin, ridge: the projection's (0 and 0 in the
    paper; 0.5 and 1e-3 in the reference code)."""

    lambda_x: float = pydantic.Field(default=0.01, ge=0)
    lambda_z: float = pydantic.Field(default=0.01, ge=0)
    epsilon: float = pydantic.Field(default=0.01, ge=0)
    steps: int = pydantic.Field(default=500, ge=1)
    lr: float = pydantic.Field(default=0.1, gt=0)
    init: Literal["public", "noise", "mix"] = "public"
    mix_weight: float = pydantic.Field(default=0.5, ge=0, le=1)
    stop_distance: float | None = pydantic.Field(default=None, gt=0)
    boxed: bool = True
    lambda_g: float = pydantic.Field(default=0.7, ge=0, le=1)
    normalization: Literal["paper", "reference"] = "paper"
    margin: float = pydantic.Field(default=0.0, ge=0)
    ridge: float = pydantic.Field(default=0.0, ge=0)


def project_gradient(
    shared: torch.Tensor, reference: torch.Tensor, margin: float = 0.0, ridge: float = 0.0
) -> torch.Tensor:
    """DCS² Eq. 11–12 (GEM's projection with one constraint), on flat vectors: ``shared`` g_c unchanged
    when ⟨g_c, g⟩ ≥ 0, else g_c + v*·g with v* = max(margin, −⟨g_c, g⟩/(‖g‖² + ridge)). Zero vectors
    are returned unchanged (the constraint then holds with equality).

    Computed in float64 with v* enlarged by a relative 1e-6, so that the constraint holds after
    rounding even when g_c ≈ −c·g and the projection nearly cancels (the exact v* leaves a rounding
    residual that can point against g)."""
    dtype = shared.dtype
    shared64, reference64 = shared.double(), reference.double()
    dot = torch.dot(shared64, reference64)
    if dot >= 0:
        return shared
    norm2 = torch.dot(reference64, reference64) + ridge
    if norm2 <= 0:
        return shared
    v = torch.clamp(-dot / norm2 * (1 + 1e-6), min=margin)
    return (shared64 + v * reference64).to(dtype)


def _flat(grads: dict[str, torch.Tensor]) -> torch.Tensor:
    return torch.cat([g.reshape(-1) for g in grads.values()])


def _restore(model: nn.Module, buffers: dict[str, torch.Tensor]) -> None:
    """Put back buffers (BatchNorm statistics) that train-mode forwards moved."""
    with torch.no_grad():
        for name, buffer in model.named_buffers():
            buffer.copy_(buffers[name])


@dataclass(frozen=True)
class Concealment:
    """Concealed samples x̃_c (normalized model input) with their labels ỹ_c, and the synthesis's
    statistics (sensitive samples, steps run, final distance and gradient cosine)."""

    x: torch.Tensor
    y: torch.Tensor
    stats: dict[str, float]


@DEFENSES.register(
    "dcs2",
    summary="conceals each sensitive sample's gradient with a synthesized look-alike-gradient sample, then "
    "projects onto the batch gradient's half-space [10 % sensitive, 500 steps, λ_g 0.7]",
    reference="Wu et al., Concealing Sensitive Samples against Gradient Leakage in FL, AAAI 2024 (Eq. 9–12)",
    params=DCS2Params,
)
class DCS2(Defense):
    """Gradient stage (FedSGD and every FedAvg minibatch holding a sensitive sample): which samples of
    the context's minibatch are sensitive follows the rule over the client's dataset; concealed samples
    start from the context's public split. Parameters: :class:`DCS2Params`. Adaptive attacks:
    ``dcs2-extra`` (reconstructs one image more per sensitive sample) and ``dcs2-prior`` (starts from
    the public class-average image)."""

    params: DCS2Params
    replaces_gradient = True
    fit_scope: ClassVar[FitScope | None] = "client"
    fit_measures_only: ClassVar[bool] = True
    #: what an update's cost grows with (a synthesis per minibatch holding a sensitive sample): the dry
    #: run's probes shorten it
    probe_budget: ClassVar[str] = "steps"

    def sensitive_samples(self, batch: ImageSet, dataset: ImageSet) -> torch.Tensor:
        """Which samples of ``batch`` (of a client's ``dataset``) are sensitive under the rule."""
        return SensitiveSamples(self.params).mask(batch, dataset)

    # -- the gradient ----------------------------------------------------------------------------------
    def gradient(
        self, model: nn.Module, x: torch.Tensor, y: torch.Tensor, context: ClientContext
    ) -> dict[str, torch.Tensor]:
        p = self.params
        flags = None
        if context.batch is not None and len(context.batch) == len(x):
            flags = self.sensitive_samples(context.batch, context.dataset)
        buffers = {k: v.detach().clone() for k, v in model.named_buffers()}
        g = parameter_gradients(model, training_loss(model, model(x), y))
        if flags is None or not bool(flags.any()):
            return g
        xs, ys = x[flags].detach(), y[flags]
        _restore(model, buffers)
        concealed_samples = self.synthesize(model, xs, ys, context)
        xc, yc = concealed_samples.x, concealed_samples.y
        _restore(model, buffers)  # BatchNorm statistics move as for one forward of batch + concealed
        # Eq. 10 in one forward of the batch with its concealed samples (the model's auxiliary terms, e.g.
        # PRECODE's KL, are counted once, over both)
        logits = model(torch.cat([x, xc]))
        n = len(x)
        concealed = p.lambda_g * cross_entropy(logits[n:], yc) + (1 - p.lambda_g) * cross_entropy(
            logits[n:], ys
        )
        loss = training_loss(model, logits[:n], y) + concealed
        if p.normalization == "reference":
            loss = loss / (2 if p.lambda_g in (0.0, 1.0) else 3)
        shared = parameter_gradients(model, loss)
        flat = project_gradient(_flat(shared), _flat(g), p.margin, p.ridge)
        out, offset = {}, 0
        for name, v in shared.items():
            out[name] = flat[offset : offset + v.numel()].view_as(v)
            offset += v.numel()
        return out

    def synthesize(
        self, model: nn.Module, xs: torch.Tensor, ys: torch.Tensor, context: ClientContext
    ) -> Concealment:
        """Concealed samples for ``xs`` (see :class:`ConcealedSampleSynthesizer`); public starts come from
        the context's public split, the valid range from its dataset facts."""
        synthesizer = _synthesizer(self.params, context.info, context.public, xs.device)
        xc, yc = synthesizer(model, xs, ys)
        return Concealment(xc, yc, synthesizer.stats)

    def fit(self, data: FitData) -> Artifact:
        """Nothing the defense uses (the synthesis runs per minibatch): the fit measures whether the
        synthesis budget converges (:func:`synthesis_convergence`), kept in the artifact's metadata; a
        run measures it on the first defended client only (``fit_measures_only``)."""
        criterion = synthesis_convergence(self.params, data)
        return Artifact({}, {METADATA_KEY: criterion} if criterion else {})


#: sensitive samples of a client on which the synthesis is compared with the paper's budget
PROBE_SAMPLES = 2
#: the synthesis budget of the reference code's default (500 Adam steps; the paper states none)
PAPER_STEPS = 500


def _synthesizer(
    params: DCS2Params, info: DatasetInfo, public: ImageSet | None, device: torch.device
) -> ConcealedSampleSynthesizer:
    """The synthesizer with normalized public starts and, when ``boxed``, the valid range."""
    if params.init != "noise" and public is None:
        raise ConfigError(
            f"dcs2.init: {params.init!r} starts from public samples: the client's context has no public "
            "split (the experiment runner provides it); use init: noise"
        )
    normalized = ImageSet(info.normalize(public.x).to(device), public.y.to(device)) if public else None
    bounds = info.normalized_bounds(torch.zeros(1, *info.shape, device=device)) if params.boxed else None
    return ConcealedSampleSynthesizer(params, normalized, bounds)


def synthesis_convergence(params: DCS2Params, data: FitData) -> dict[str, Any] | None:
    """The synthesis's convergence (``reference`` kind): Eq. 9's objective reached with ``steps`` against
    the reference code's 500, for the client's first sensitive samples under the cell's untrained
    model, from the same seeded starts (None without a model or a sensitive sample)."""
    if data.model is None or not len(data.data):
        return None
    flags = SensitiveSamples(params).mask(data.data, data.data)
    xs, ys = data.data.x[flags][:PROBE_SAMPLES], data.data.y[flags][:PROBE_SAMPLES]
    if not len(xs):
        return None
    model = data.model.to(data.device).train()
    xs, ys = data.info.normalize(xs.to(data.device)), ys.to(data.device)

    def synthesis(steps: int) -> dict[str, float]:
        synthesizer = _synthesizer(params.model_copy(update={"steps": steps}), data.info, data.public,
                                   data.device)  # fmt: skip
        with torch.random.fork_rng(devices=[data.device] if data.device.type == "cuda" else []):
            torch.manual_seed(data.seed)  # the same starts for both budgets; the caller's RNG untouched
            synthesizer(model, xs, ys)
        return synthesizer.stats

    run = synthesis(params.steps)
    at_paper = run if params.steps >= PAPER_STEPS else synthesis(PAPER_STEPS)
    objective = f"the synthesis's Eq. 9 objective, {len(xs)} sensitive samples"
    return reference("dcs2", objective, params.steps, PAPER_STEPS, run["loss_start"], run["loss"],
                     at_paper["loss"]).as_json()  # fmt: skip


class ConcealedSampleSynthesizer:
    """DCS² Eq. 9: concealed samples whose gradient resembles the sensitive samples' while the images
    move away from them, by Adam on

        1 − cos(∇θL(x̃_c, ỹ_c), ∇θL(x_s, y_s)) + exp(−λ_x·mean‖x̃_c − x_s‖₂)
        + λ_z·(‖f(x̃_c) − f(x_s)‖ / ‖f(x_s)‖ − ε)

    with f the logits, the cosine global over all parameters and over the group of sensitive samples,
    the lr decayed ×0.1 at 3/8, 5/8, 7/8 of the steps, stopped early once the distance exceeds
    ``stop_distance``. Parameters: :class:`DCS2Params` (λ_x, λ_z, ε, steps, lr, init, mix_weight,
    stop_distance, boxed). ``public``: normalized public images and labels for the ``public``/``mix``
    starts; ``bounds``: the valid range (lo, hi) in normalized space, used when ``boxed``.
    ``stats`` describes the latest call (steps run, final distance and cosine)."""

    def __init__(
        self,
        params: DCS2Params,
        public: ImageSet | None = None,
        bounds: tuple[torch.Tensor, torch.Tensor] | None = None,
    ) -> None:
        self.params = params
        self.public = public
        self.bounds = bounds
        self.stats: dict[str, float] = {}

    def __call__(
        self, model: nn.Module, xs: torch.Tensor, ys: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Concealed samples for the sensitive samples ``xs`` (normalized model input, labels ``ys``);
        returns (x̃_c, ỹ_c), detached. Random draws (starts, labels) come from torch's global RNG, which
        the client seeds per local step."""
        p = self.params
        with torch.no_grad():
            target_logits = model(xs)
        everything = [q for q in model.parameters() if q.requires_grad]
        reached = torch.autograd.grad(training_loss(model, model(xs), ys), everything, allow_unused=True)
        params = [q for q, t in zip(everything, reached, strict=True) if t is not None]
        target = [t.detach() for t in reached if t is not None]
        x0, yc = self._starts(xs, target_logits.shape[1])
        xc = x0.clone().requires_grad_(True)
        opt = torch.optim.Adam([xc], lr=p.lr)
        sched = ig_step_schedule(opt, p.steps)
        target_norm = torch.sqrt(sum(t.pow(2).sum() for t in target))
        logit_norm = target_logits.norm().clamp_min(1e-12)
        steps_run, distance, first = 0, 0.0, None
        for _ in range(p.steps):
            logits = model(xc)
            grads = torch.autograd.grad(training_loss(model, logits, yc), params, create_graph=True)
            dot = sum((a * b).sum() for a, b in zip(grads, target, strict=True))
            # clamped inside the root: a confident model's gradient on the start can be exactly zero
            # (softmax 1.0 in float32), where the root's derivative is infinite and Adam's step NaN
            norm = torch.sqrt(sum(a.pow(2).sum() for a in grads).clamp_min(1e-30))
            cosine = dot / (norm * target_norm + 1e-12)
            dist = (xc - xs).flatten(1).norm(dim=1).mean()
            latent = (logits - target_logits).norm() / logit_norm
            loss = (1 - cosine) + torch.exp(-p.lambda_x * dist) + p.lambda_z * (latent - p.epsilon)
            first = float(loss.detach()) if first is None else first
            (xc.grad,) = torch.autograd.grad(loss, [xc])
            opt.step()
            if p.boxed and self.bounds is not None:
                with torch.no_grad():
                    lo, hi = self.bounds
                    xc.copy_(torch.max(torch.min(xc, hi.to(xc.device)), lo.to(xc.device)))
            sched.step()
            steps_run += 1
            distance = float(dist.detach())
            if p.stop_distance is not None and distance > p.stop_distance:
                break
        self.stats = {
            "sensitive": float(len(xs)),
            "steps": float(steps_run),
            "distance": distance,
            "cosine": float(cosine.detach()),
            "loss_start": float(first if first is not None else "nan"),
            "loss": float(loss.detach()),  # Eq. 9 at the last step's iterate
        }
        return xc.detach(), yc

    def _starts(self, xs: torch.Tensor, num_classes: int) -> tuple[torch.Tensor, torch.Tensor]:
        p = self.params
        n = len(xs)
        if p.init == "noise":
            return torch.randn_like(xs), torch.randint(0, num_classes, (n,), device=xs.device)
        if self.public is None or len(self.public) == 0:
            raise ConfigError(f"dcs2.init: {p.init!r} needs public samples (or use init: noise)")
        pick = torch.randint(0, len(self.public), (n,))
        start = self.public.x[pick].to(xs.device)
        yc = self.public.y[pick].to(xs.device)
        if p.init == "mix":
            start = p.mix_weight * start + (1 - p.mix_weight) * xs
        return start, yc
