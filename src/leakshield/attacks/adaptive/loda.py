"""The adaptive attack on LODA (Wan et al., Sec. 4.2, Eq. 5–6): reconstruct the obscured image x′ from
the update (Inverting Gradients), then solve for the private image x the stationarity condition that x′
satisfies if the encoder converged: min_x ‖∇g(x′)ᵀ(g(x′) − g(x)) − c·(x′ − x)‖², by Adam on x in the
valid pixel range (the paper: c searched over {0, 1, 5, 10, 20}, set to 1; 100 steps of lr 0.01).

``loda-inverse-kkt`` is the bound-aware variant: where x′ lies on the box bound of Eq. 4 (most of its
pixels on the digits here), x′ is a constrained minimizer and Eq. 5 holds only as a KKT inequality, so
it penalizes only the violations of that inequality there instead of forcing Eq. 6's equality, with
the defense's own c (public) rather than the paper's 1.

The extractor g is public: the attack trains it on the public split with the settings the defense's
public configuration names (the same content-addressed artifact the clients use).
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Sequence
from typing import Literal

import pydantic
import torch

from leakshield.artifacts import Artifact, FitData
from leakshield.attacks.adaptive.inversion import ADAPTIVE_IG, find_defense
from leakshield.attacks.base import ATTACKS, Reconstruction
from leakshield.attacks.passive.inversion.engine import GradientInversion
from leakshield.attacks.passive.inversion.params import GradientInversionParams
from leakshield.attacks.passive.inversion.presets import preset_params
from leakshield.data.types import DatasetInfo, ImageSet
from leakshield.defenses.loda.defense import loda_c
from leakshield.defenses.loda.encoder import stationarity_residual
from leakshield.defenses.loda.extractor import ExtractorParams, build_extractor, feature_map, fitted_extractor
from leakshield.fl.types import ServerView
from leakshield.registry import Params
from leakshield.threats import Adversary, Knowledge, threat


class LodaInverseParams(preset_params("loda-inverse", ADAPTIVE_IG)):  # type: ignore[misc]
    """inverse_c: c of Eq. 6 (the paper: 1; None: the c of the LODA defense the view names, which is
    public); inverse_steps and inverse_lr: Adam on x (100, 0.01);
    inverse_init: where x starts, ``grey`` (0.5) or ``uniform`` noise (not at x′, which is a trivial root
    of Eq. 6: the residual vanishes at x = x′). kkt: at pixels where x′ is 0 or 1, only the violations
    of the KKT inequality count (the bound-aware variant). The IG fields reconstruct x′ first."""

    inverse_c: float | None = pydantic.Field(default=1.0, ge=0)
    kkt: bool = False
    inverse_init: Literal["grey", "uniform"] = "grey"
    inverse_steps: int = pydantic.Field(default=100, ge=1)
    inverse_lr: float = pydantic.Field(default=0.01, gt=0)


class LodaInverse(GradientInversion):
    """See the module docstring. Fits on the public split: keeps it, to build the extractor the view's
    LODA configuration names (a cached artifact shared with the clients)."""

    params: LodaInverseParams
    fit_scope = "public"

    def __init__(self, params: Params, init_images: torch.Tensor | None = None) -> None:
        super().__init__(params, init_images)
        #: the defense's c per defense setting, when the attack takes it (inverse_c: None); for this
        #: instance's artifact only (a copy with another artifact starts empty)
        self._defense_c: dict[str, float] = {}

    def with_artifact(self, artifact: Artifact) -> LodaInverse:
        other = super().with_artifact(artifact)
        other._defense_c = {}
        return other

    def fit(self, data: FitData) -> Artifact:
        """The public split and the extractor of the default settings (the clients' cached artifact when
        they use those); a view naming other settings gets its extractor trained on the spot."""
        settings = ExtractorParams()
        net = fitted_extractor(settings, data.info, data.data, data.seed, data.cache, data.device)
        tensors = {f"extractor.{k}": v.detach().cpu() for k, v in net.state_dict().items()}
        return Artifact(
            {"public.x": data.data.x.cpu(), "public.y": data.data.y.cpu(), **tensors},
            {"seed": data.seed, "extractor": _identity(settings)},
        )

    def reconstruct(self, view: ServerView, *, seed: int = 0) -> Reconstruction:
        return self.reconstruct_many([view], seeds=[seed])[0]

    def reconstruct_many(
        self, views: Sequence[ServerView], *, seeds: Sequence[int], progress: bool = False
    ) -> list[Reconstruction]:
        """IG on every view (vectorized where it can be), then Eq. 6 on each reconstruction."""
        base = GradientInversion(
            GradientInversionParams(
                **self.params.model_dump(include=set(GradientInversionParams.model_fields))
            )
        )
        base.name = self.name
        obscured = base.reconstruct_many(views, seeds=seeds, progress=progress)
        return [self._invert(v, rec, s) for v, rec, s in zip(views, obscured, seeds, strict=True)]

    def _invert(self, view: ServerView, obscured: Reconstruction, seed: int) -> Reconstruction:
        """x* from the reconstructed obscured image x′ (Eq. 6); unchanged without LODA in the view."""
        loda = find_defense(view.defenses, "loda")
        if loda is None:
            obscured.stats["inverted"] = 0.0
            return obscured
        if self.artifact is None:
            raise RuntimeError("loda-inverse needs its public-split artifact (fit it first)")
        info = view.data_info
        device = next(view.model.parameters()).device
        tensors = self.artifact.tensors
        settings = ExtractorParams(**loda.params.model_dump(include=set(ExtractorParams.model_fields)))
        public = ImageSet(tensors["public.x"].to(device), tensors["public.y"].to(device))
        fit_seed = int(self.artifact.metadata.get("seed", 0))
        if _identity(settings) == self.artifact.metadata.get("extractor"):
            net = build_extractor(settings, info, 0).to(device)
            prefix = "extractor."
            net.load_state_dict({k[len(prefix) :]: v for k, v in tensors.items() if k.startswith(prefix)})
        else:
            net = fitted_extractor(settings, info, public, fit_seed, None, device)
        g = feature_map(net.eval(), settings)
        x_prime = obscured.images.to(device)
        if self.params.inverse_init == "uniform":
            x = torch.rand(x_prime.shape, generator=torch.Generator().manual_seed(seed)).to(device)
        else:
            x = torch.full_like(x_prime, 0.5)
        p = self.params
        c = p.inverse_c
        if c is None:  # the defense's own c: public, or calibrated on the public split as the clients do
            # a calibration is many encodings: computed once per defense setting, not once per view
            key = json.dumps(loda.params.model_dump(mode="json"), sort_keys=True)
            if key not in self._defense_c:
                self._defense_c[key] = loda_c(loda.params, info, public, fit_seed, None, device)
            c = self._defense_c[key]
        x, residual = solve_stationarity(
            g, x_prime, x, info, c=c, steps=p.inverse_steps, lr=p.inverse_lr, kkt=p.kkt
        )
        stats = {**obscured.stats, "inverted": 1.0, "residual": residual}
        return dataclasses.replace(obscured, images=x.cpu(), stats=stats, normalized=None)


def solve_stationarity(
    g: Callable[[torch.Tensor], torch.Tensor],
    obscured: torch.Tensor,
    start: torch.Tensor,
    info: DatasetInfo,
    *,
    c: float,
    steps: int,
    lr: float,
    kkt: bool = False,
) -> tuple[torch.Tensor, float]:
    """Eq. 6: x* = argmin_x ‖∇g(x′)ᵀ(g(x′) − g(x)) − c·(x′ − x)‖² by ``steps`` Adam steps of ``lr`` on x
    in [0, 1] from ``start`` (``kkt``: the bound-aware residual); returns x* and the residual summed over
    the batch before the last step."""
    x = start.detach().clone().requires_grad_(True)
    opt = torch.optim.Adam([x], lr=lr)
    loss = torch.zeros(())
    for _ in range(steps):
        loss = stationarity_residual(g, obscured, x, info, c, kkt=kkt).sum()
        opt.zero_grad()
        loss.backward()
        opt.step()
        with torch.no_grad():
            x.clamp_(0.0, 1.0)
    return x.detach(), float(loss.detach())


def _identity(settings: ExtractorParams) -> dict:
    """The fields that determine an extractor's weights."""
    return settings.model_dump(
        mode="json", include={"extractor", "extractor_params", "weights", "epochs", "lr"}
    )


ATTACKS.register(
    "loda-inverse",
    summary="adaptive vs LODA: IG reconstructs the obscured image, then Eq. 6 (the encoder's stationarity "
    "condition with the public extractor) is solved for the private image; c 1, 100 Adam steps",
    reference="Wan et al., Learning to Obscure Data, Sec. 4.2, Eq. 5–6",
    params=LodaInverseParams,
    threat=threat(
        Adversary.OBSERVING_SERVER, (Knowledge.PROTOCOL, Knowledge.DEFENSES, Knowledge.PUBLIC_SPLIT)
    ),
    targets=("loda",),
    aliases={"loda-inverse-kkt": {"kkt": True, "inverse_c": None}},
)(LodaInverse)
