"""The Cocktail Party Attack (Kariyappa et al., *Cocktail Party Attack: Breaking Aggregation-Based
Privacy in Federated Learning using Independent Component Analysis*, ICML 2023): a passive server
separates the samples mixed in the gradient of a fully connected layer, however many clients' updates
secure aggregation summed.

The weight gradient of a fully connected layer reading the images is ∇W = Σ_j δ_j x_jᵀ: each of its m
rows is a linear mixture of the B inputs x_j (B ≤ m). Images are non-Gaussian and mutually
independent, so independent component analysis (FastICA, maximizing non-Gaussianity: the paper's
negentropy objective) recovers each x_j up to sign and scale from the rows.

Two steps differ from the paper's optimizer, each measured on the 128 CIFAR-10 victims of PRECODE
(``python benchmarks/aggregation.py``):

- The paper adds a total-variation prior to its objective. leakshield estimates the unmixing on the
  rows' pixel differences, where photos are sparse and mixing commutes with the differences, then
  applies it to the rows themselves. On 32 photos, ICA on the raw rows separates almost none of them.
- The paper normalizes each component for display. With a bias in the layer, ∇b = Σ_j δ_j carries the
  same mixing, so the unmixing applied to it gives each source's exact scale and sign: x = c / s, the
  ratio the imprint attack reads. Without a bias, leakshield picks the sign whose image correlates with
  the public split's mean image (kept when it sends the model unchanged) and min-max scales it.

Parameters: ``iterations`` and ``tolerance``: FastICA's budget and stopping threshold; ``seed`` offset of
FastICA's random start (the cell's victim seed is added).
"""

from __future__ import annotations

import math
import time
import warnings

import pydantic
import torch
from sklearn.decomposition import FastICA
from sklearn.exceptions import ConvergenceWarning
from torch import nn

from leakshield.attacks.active.trap_weights import check_image_fed_linear, first_image_layer
from leakshield.attacks.base import ATTACKS, Attack, Reconstruction
from leakshield.attacks.passive.labels import granted_or_inferred_labels
from leakshield.fl.types import PreparedModel, PublicMean, ServerKnowledge, ServerView
from leakshield.registry import Params
from leakshield.threats import Adversary, Knowledge, threat


class CocktailPartyParams(Params):
    """iterations: FastICA's iteration budget. tolerance: its stopping threshold. seed: added to the
    victim's seed for FastICA's random start."""

    iterations: int = pydantic.Field(default=2000, ge=1)
    tolerance: float = pydantic.Field(default=1e-5, gt=0)
    seed: int = 0


def spatial_differences(rows: torch.Tensor, shape: tuple[int, ...]) -> torch.Tensor:
    """Each row (a flattened C×H×W image) as its horizontal and vertical pixel differences."""
    images = rows.reshape(-1, *shape)
    across = images[..., :, 1:] - images[..., :, :-1]
    down = images[..., 1:, :] - images[..., :-1, :]
    return torch.cat([across.flatten(1), down.flatten(1)], dim=1)


def separate(
    mixtures: torch.Tensor,
    sources: int,
    shape: tuple[int, ...],
    *,
    iterations: int,
    tolerance: float,
    seed: int,
) -> torch.Tensor:
    """The unmixing matrix (sources × m) of the ``sources`` signals mixed in ``mixtures`` (m rows, each a
    mixture of the same flattened images of ``shape``): its product with the mixtures gives each signal
    up to sign and scale.

    Mixing is linear, so it commutes with taking pixel differences; the unmixing matrix is estimated by
    FastICA on the differences, where images are sparse and far from Gaussian (the total-variation prior
    of the paper's objective), then applied to the mixtures themselves."""
    rows = mixtures.double().cpu()
    if sources == 1:  # one source: every row is a multiple of it; the leading singular direction unmixes
        return torch.linalg.svd(rows, full_matrices=False).U[:, :1].T
    ica = FastICA(n_components=sources, whiten="unit-variance", max_iter=iterations, tol=tolerance,
                  random_state=seed % 2**32)  # fmt: skip
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        warnings.filterwarnings("ignore", "n_components is too large")
        ica.fit(spatial_differences(rows, shape).T.numpy())
    return torch.from_numpy(ica.components_).to(rows)


def fix_sign_and_scale(components: torch.Tensor, reference: torch.Tensor) -> torch.Tensor:
    """Each component (rows, pixel vectors) with the sign under which it correlates positively with the
    ``reference`` image (the public mean), min-max scaled to [0, 1]."""
    centred = components - components.mean(dim=1, keepdim=True)
    ref = reference.flatten() - reference.mean()
    sign = torch.where(centred @ ref.to(centred) >= 0, 1.0, -1.0).to(components)
    signed = components * sign[:, None]
    low, high = signed.min(dim=1, keepdim=True).values, signed.max(dim=1, keepdim=True).values
    return (signed - low) / (high - low).clamp_min(1e-12)


@ATTACKS.register(
    "cocktail-party",
    summary="honest-but-curious server: independent component analysis separates the samples mixed in a "
    "fully connected layer's gradient, also of a securely aggregated sum",
    reference="Kariyappa et al., Cocktail Party Attack: Breaking Aggregation-Based Privacy in Federated "
    "Learning using Independent Component Analysis, ICML 2023",
    params=CocktailPartyParams,
    threat=threat(
        Adversary.OBSERVING_SERVER, (Knowledge.PROTOCOL, Knowledge.PUBLIC_SPLIT), secure_aggregation=True
    ),
)
class CocktailPartyAttack(Attack):
    """Needs FedSGD (or a one-step update), a model whose first layer is fully connected (mlp) and at
    least as many neurons as samples in the update."""

    params: CocktailPartyParams

    def check_model(self, model: nn.Module, shape: tuple[int, int, int]) -> None:
        """Refuse, before a run, a model it cannot attack (its mixtures are a fully connected layer's
        rows on the image: :func:`~leakshield.attacks.active.trap_weights.check_image_fed_linear`)."""
        check_image_fed_linear(model, shape)

    def prepare_model(self, model: nn.Module, knowledge: ServerKnowledge) -> PreparedModel:
        """Sends the model unchanged; keeps the public split's mean image (to fix each sign)."""
        return PreparedModel(model, PublicMean(knowledge.public.x.double().mean(dim=0).cpu()))

    def reconstruct(self, view: ServerView, *, seed: int = 0) -> Reconstruction:
        start = time.perf_counter()
        info = view.data_info
        name, layer = first_image_layer(view.model, info, self.name)
        if layer.out_features < view.batch_size:
            raise ValueError(
                f"cocktail-party: {view.batch_size} samples cannot be separated from {layer.out_features} "
                "neurons (ICA needs at least as many mixtures as sources)"
            )
        if math.prod(info.shape) < 2 * view.batch_size:
            raise ValueError(
                f"cocktail-party: {view.batch_size} samples cannot be separated from images of "
                f"{math.prod(info.shape)} pixels (ICA needs many more pixels than sources)"
            )
        gradient = view.update.gradient()
        grad_w = gradient[f"{name}.weight"].double()
        unmixing = separate(grad_w, view.batch_size, info.shape, iterations=self.params.iterations,
                            tolerance=self.params.tolerance, seed=self.params.seed + seed)  # fmt: skip
        components = unmixing @ grad_w
        if layer.bias is not None:  # ∇b_i = Σ_j δ_ij: the same unmixing gives each source's scale and sign
            scale = unmixing @ gradient[f"{name}.bias"].double()
            images = info.denormalize((components / scale[:, None]).float().view(-1, *info.shape)).clamp(0, 1)
        else:
            if not isinstance(view.secrets, PublicMean):
                raise ValueError("cocktail-party needs the public mean image it kept (prepare_model)")
            images = fix_sign_and_scale(components, view.secrets.image).float().view(-1, *info.shape)
        labels = granted_or_inferred_labels(view)
        return Reconstruction(images=images.float().cpu(), labels=labels.cpu(),
                              stats={"seconds": time.perf_counter() - start})  # fmt: skip
