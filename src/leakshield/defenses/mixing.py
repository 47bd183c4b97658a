"""Instance-mixing defenses: MixUp (Zhang et al., ICLR 2018) and InstaHide (Huang et al., ICML 2020), as
evaluated by LODA (Wan et al., Sec. 3.2, Eq. 2) with the coefficient sampling of GradAttack.

Each training image x becomes ``Σ_j λ_j x_j``: λ ~ Dirichlet(α) with α = [3, 1, …, 1] (the image itself
takes the first, largest-on-average coefficient), resampled until max λ ≤ 0.65; the partners are drawn
from the client's local dataset (or the minibatch). Labels are mixed with the same coefficients. InstaHide
draws ``k_private − 1`` private and ``k − k_private`` public partners (labels only from the private ones,
as in InstaHide) and flips the sign of every pixel at random: E(x) = σ(Σ λ_j x_j) (LODA Eq. 2). The flip
acts on the model's normalized input (InstaHide normalizes pixels to a zero-centred range first); the
encoded image is handed on in pixel units, so it may leave [0, 1]. New partners, coefficients and signs
are drawn for every minibatch, hence every epoch.
"""

from __future__ import annotations

from typing import Literal

import numpy as np
import pydantic
import torch
import torch.nn.functional as F

from leakshield.data.types import ImageSet
from leakshield.defenses.base import DEFENSES, ClientContext, Defense
from leakshield.errors import ConfigError
from leakshield.registry import Params


class MixUpParams(Params):
    """k: images per encoding (the private image and k − 1 partners). alpha: Dirichlet concentration,
    own image first (default [3, 1, …, 1]). max_coefficient: coefficients are resampled until none
    exceeds it. partners: drawn from the client's local ``dataset`` or from the current ``batch``."""

    k: int = pydantic.Field(default=4, ge=2)
    alpha: list[pydantic.PositiveFloat] | None = None
    max_coefficient: float = pydantic.Field(default=0.65, gt=0, le=1)
    partners: Literal["dataset", "batch"] = "dataset"

    @pydantic.model_validator(mode="after")
    def _consistent(self) -> MixUpParams:
        if self.alpha is not None and len(self.alpha) != self.k:
            raise ValueError(f"alpha: {len(self.alpha)} values for k = {self.k} images")
        if self.max_coefficient * self.k < 1:
            raise ValueError(f"max_coefficient: {self.max_coefficient} · k < 1, no coefficients sum to 1")
        return self

    @property
    def concentration(self) -> list[float]:
        return list(self.alpha) if self.alpha is not None else [3.0] + [1.0] * (self.k - 1)


class InstaHideParams(MixUpParams):
    """InstaHide adds: k_private: images of the client's own data per encoding (the image itself
    included); the other k − k_private come from the public split. sign_flip: random pixel signs."""

    k_private: int = pydantic.Field(default=2, ge=1)
    sign_flip: bool = True

    @pydantic.model_validator(mode="after")
    def _private_within_k(self) -> InstaHideParams:
        if self.k_private > self.k:
            raise ValueError(f"k_private: {self.k_private} exceeds k = {self.k}")
        return self


def sample_coefficients(
    n: int, alpha: list[float], max_coefficient: float, generator: torch.Generator
) -> torch.Tensor:
    """n rows of Dirichlet(α) coefficients, each resampled until its maximum is ≤ ``max_coefficient``."""
    seed = int(torch.randint(0, 2**62, (1,), generator=generator, device=generator.device))
    rng = np.random.default_rng(seed)
    rows = np.empty((n, len(alpha)))
    for i in range(n):
        for _ in range(10_000):
            row = rng.dirichlet(alpha)
            if row.max() <= max_coefficient:
                break
        else:
            raise ConfigError(f"max_coefficient: {max_coefficient} is never met by Dirichlet({alpha})")
        rows[i] = row
    return torch.from_numpy(rows).float()


def soft_labels(y: torch.Tensor, num_classes: int) -> torch.Tensor:
    """Class probabilities (N × C) from class indices or already soft labels."""
    if y.dtype in (torch.int64, torch.int32):
        return F.one_hot(y, num_classes).float()
    return y.float()


class MixUp(Defense):
    """Data stage: every image is replaced by its mixture with k − 1 partners; labels mixed alike. The
    partners come from the client's dataset (``partners: dataset``, the context's ``dataset``) or the
    minibatch; the class count from the context's dataset facts."""

    params: MixUpParams

    @property
    def private_count(self) -> int:
        return self.params.k

    def data_hook(
        self, x: torch.Tensor, y: torch.Tensor, context: ClientContext
    ) -> tuple[torch.Tensor, torch.Tensor]:
        p = self.params
        generator = context.generator
        n, classes = len(x), context.info.num_classes
        pool = context.dataset if p.partners == "dataset" else ImageSet(x, y)
        lam = sample_coefficients(n, p.concentration, p.max_coefficient, generator).to(x.device)
        mixed = lam[:, 0, None, None, None] * x
        labels = lam[:, :1] * soft_labels(y, classes)
        kp = self.private_count
        dev = generator.device
        components = [x]
        for j in range(1, p.k):
            source, with_labels = (pool, True) if j < kp else (context.public, False)
            if source is None:
                raise ConfigError(
                    f"{self.name}: public partners need the public split (the client's context)"
                )
            idx = torch.randint(0, len(source), (n,), generator=generator, device=dev).to(source.x.device)
            components.append(source.x[idx].to(x.device))
            mixed = mixed + lam[:, j, None, None, None] * components[-1]
            if with_labels:
                labels = labels + lam[:, j : j + 1] * soft_labels(source.y[idx].to(x.device), classes)
        # for the evaluator: each image's component of largest weight (LODA scores MixUp rows against it)
        largest = lam.argmax(dim=1)
        context.notes["largest_component"] = torch.stack(components, dim=1)[
            torch.arange(n, device=x.device), largest
        ]
        return self._encode(mixed, context), labels

    def _encode(self, mixed: torch.Tensor, context: ClientContext) -> torch.Tensor:
        return mixed


DEFENSES.register(
    "mixup",
    summary="trains on mixtures of k images of the client's data with mixed labels [k 4, Dirichlet "
    "(3,1,1,1), max 0.65]",
    reference="Zhang et al., mixup, ICLR 2018; as a defense: LODA (Wan et al.) Sec. 5.1; GradAttack",
    params=MixUpParams,
)(MixUp)


@DEFENSES.register(
    "instahide",
    summary="MixUp of k images (k_private own, the rest public) plus random pixel sign flips [k 4, "
    "k_private 2]",
    reference="Huang et al., InstaHide, ICML 2020; LODA (Wan et al.) Eq. 2; GradAttack",
    params=InstaHideParams,
)
class InstaHide(MixUp):
    """Data stage: E(x) = σ(Σ_j λ_j x_j) (LODA Eq. 2) with private and public partners. The adaptive
    attack is ``carlini`` (Carlini et al., 2021), which watches the client over many rounds."""

    params: InstaHideParams

    @property
    def private_count(self) -> int:
        return self.params.k_private

    def _encode(self, mixed: torch.Tensor, context: ClientContext) -> torch.Tensor:
        if not self.params.sign_flip:
            return mixed
        generator, info = context.generator, context.info
        signs = torch.randint(0, 2, mixed.shape, generator=generator, device=generator.device).to(
            mixed.device
        )
        return info.denormalize(info.normalize(mixed) * (signs * 2 - 1))
