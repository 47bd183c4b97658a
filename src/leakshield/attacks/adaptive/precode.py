"""The analytic adaptive attack on PRECODE (Balunović et al., *Bayesian Framework for Gradient Leakage*,
ICLR 2022, Sec. 5: "one non-zero bias entry suffices").

PRECODE's sampling makes the gradient of the layers *after* the bottleneck unpredictable, but the input
of any fully connected layer is still ∇W_l / ∇b_l for a batch of one, whatever comes after it:

1. if a fully connected layer receives the image itself (MLPs), the image is read off exactly;
2. otherwise the bottleneck's own encoder is such a layer: its input, the feature vector z = E(x) the
   network computed before the bottleneck, is read off exactly, and so is ∂L/∂z = W_encᵀ·∇b_enc. The
   layers before the bottleneck are deterministic and their gradient is the vector–Jacobian product of
   E with ∂L/∂z, so the image is found by IG-style optimization on that part of the network alone:
   matching its gradient (cosine) and z, with TV. No sample of the bottleneck is ever needed.
"""

from __future__ import annotations

import time

import pydantic
import torch
from torch import nn

from leakshield.attacks.base import ATTACKS, Reconstruction
from leakshield.attacks.passive.analytic import AnalyticFCInversion, AnalyticParams, first_linear_fed_by_image
from leakshield.attacks.passive.inversion.objectives import cosine_distance, total_variation
from leakshield.attacks.passive.labels import granted_or_inferred_labels
from leakshield.defenses.precode import PrecodeBottleneck
from leakshield.errors import ConfigError
from leakshield.fl.types import ServerView
from leakshield.schedules import ig_step_schedule
from leakshield.threats import ADAPTIVE_OBSERVER


class PrecodeAnalyticParams(AnalyticParams):
    """Analytic part: see ``analytic``. Feature inversion, when no fully connected layer sees the image:
    Adam from a mid-grey start, boxed to valid pixels, on cosine(dummy, observed gradient of the layers
    before the bottleneck) + ``feature_weight``·||E(x') − z||²/||z||² + ``tv``·TV(x'). iterations: its
    steps (IG's step schedule). lr: its step size. feature_weight: the weight of the feature term. tv: the
    weight of total variation."""

    iterations: int = pydantic.Field(default=2000, ge=1)
    feature_weight: float = pydantic.Field(default=1.0, ge=0)
    lr: float = pydantic.Field(default=0.1, gt=0)
    tv: float = pydantic.Field(default=1e-4, ge=0)


@ATTACKS.register(
    "precode-analytic",
    summary="adaptive vs PRECODE: exact input of a fully connected layer before the bottleneck (∇W/∇b); "
    "else the bottleneck's input features, then feature inversion",
    reference="Balunović et al., Bayesian Framework for Gradient Leakage, ICLR 2022 (Sec. 5)",
    params=PrecodeAnalyticParams,
    threat=ADAPTIVE_OBSERVER,
    targets=("precode",),
)
class PrecodeAnalytic(AnalyticFCInversion):
    """Reads inputs of fully connected layers off a FedSGD gradient (batch of one for the feature path;
    the image path handles larger batches like ``analytic``). Parameters: :class:`PrecodeAnalyticParams`."""

    params: PrecodeAnalyticParams

    def check_model(self, model: nn.Module, shape: tuple[int, int, int]) -> None:
        """Nothing to refuse before a run: without a layer fed by the image it reads the PRECODE
        bottleneck's, which the defense inserts at run time."""

    def reconstruct(self, view: ServerView, *, seed: int = 0) -> Reconstruction:
        try:
            first_linear_fed_by_image(view.model, view.data_info.shape)
        except ValueError:
            return self._invert_features(view, seed)
        rec = super().reconstruct(view, seed=seed)
        rec.stats["path_image"] = 1.0
        return rec

    def _invert_features(self, view: ServerView, seed: int) -> Reconstruction:
        start = time.perf_counter()
        p = self.params
        model, info = view.model, view.data_info
        found = [(n, m) for n, m in model.named_modules() if isinstance(m, PrecodeBottleneck)]
        if not found:
            raise ConfigError(
                "precode-analytic: no fully connected layer sees the image and no PRECODE "
                "bottleneck is in the model"
            )
        if view.batch_size != 1 or view.update.protocol.algorithm != "fedsgd":
            raise ConfigError("precode-analytic: the feature path needs a FedSGD gradient of one image")
        name, bottleneck = found[0]
        gradient = view.update.gradient()
        device = next(model.parameters()).device
        grad_w = gradient[f"{name}.encoder.weight"].to(device)
        grad_b = gradient[f"{name}.encoder.bias"].to(device)
        z = self._candidates(grad_w.double(), grad_b.double(), 1).float()  # the bottleneck's input
        grad_z = grad_b @ bottleneck.encoder.weight.detach()  # ∂L/∂z = W_encᵀ·∂L/∂(μ, σ̃)

        def features(x: torch.Tensor) -> torch.Tensor:
            """E(x): the network up to the bottleneck's input (the forward stops there)."""
            captured: list[torch.Tensor] = []

            def stop(_module: nn.Module, inputs: tuple[torch.Tensor, ...]) -> None:
                captured.append(inputs[0].flatten(1))
                raise _StopForwardError

            handle = bottleneck.register_forward_pre_hook(stop)
            try:
                model(x)
            except _StopForwardError:
                pass
            finally:
                handle.remove()
            return captured[0]

        probe = info.normalize(torch.full((1, *info.shape), 0.5, device=device))
        names, params = self._parameters_before(model, features(probe.requires_grad_(True)))
        target = [gradient[n].to(device) for n in names]
        lo, hi = info.normalized_bounds(probe)
        x = probe.detach().clone().requires_grad_(True)
        opt = torch.optim.Adam([x], lr=p.lr)
        sched = ig_step_schedule(opt, p.iterations)
        scale = z.pow(2).sum().clamp_min(1e-12)
        best, best_loss = x.detach().clone(), float("inf")
        for _ in range(p.iterations):
            e = features(x)
            # the pre-bottleneck gradient the client computed is the VJP of E with the known ∂L/∂z
            dummy = torch.autograd.grad((e * grad_z).sum(), params, create_graph=True) if params else []
            loss = p.feature_weight * (e - z).pow(2).sum() / scale + p.tv * total_variation(x)
            if params:
                loss = loss + cosine_distance(list(dummy), target)
            (x.grad,) = torch.autograd.grad(loss, [x])
            value = float(loss.detach())
            if value < best_loss:
                best_loss, best = value, x.detach().clone()
            opt.step()
            sched.step()
            with torch.no_grad():
                x.copy_(torch.max(torch.min(x, hi), lo))
        images = info.denormalize(best).clamp(0, 1).cpu()
        stats = {
            "path_image": 0.0,
            "objective": best_loss,
            "matched_layers": float(len(names)),
            "seconds": time.perf_counter() - start,
        }
        labels = granted_or_inferred_labels(view).cpu()
        return Reconstruction(images=images, labels=labels, stats=stats, normalized=best.cpu())

    @staticmethod
    def _parameters_before(model: nn.Module, e: torch.Tensor) -> tuple[list[str], list[torch.Tensor]]:
        """The parameters E depends on (those before the bottleneck), found from one forward's graph."""
        named = list(model.named_parameters())
        grads = torch.autograd.grad(e.sum(), [q for _, q in named], allow_unused=True)
        kept = [(n, q) for (n, q), g in zip(named, grads, strict=True) if g is not None]
        return [n for n, _ in kept], [q for _, q in kept]


class _StopForwardError(Exception):
    """Raised by a hook to end a forward once the features before the bottleneck are known."""
