"""The LODA defense (Wan et al., Sec. 4, Algorithm 1): every client trains on its obscured dataset; the
server (and any attacker) only ever sees gradients of obscured images.

A client fit: each defended client encodes its own dataset (from random images of the public split, or
of another dataset's training files as the paper starts CIFAR-10 clients from CIFAR-100, with the
extractor trained on the public split), chunk by chunk, every chunk an artifact, so an interrupted
encoding resumes. The data stage swaps each minibatch image for its obscured version (by the minibatch's
indices; an image outside the client's dataset is encoded on the spot, seeded by its content, with the
extractor of the client's own fit: same seed, the run's cache).
"""

from __future__ import annotations

import functools
import hashlib
from collections.abc import Callable
from typing import Any, ClassVar

import pydantic
import torch
from tqdm.auto import tqdm

from leakshield.artifacts import Artifact, ArtifactCache, FitData, FitKey, FitScope, data_fingerprint
from leakshield.data.lookup import swap_in
from leakshield.data.registry import list_datasets, load_dataset
from leakshield.data.types import DatasetInfo, ImageSet
from leakshield.defenses.base import DEFENSES, ClientContext, Defense
from leakshield.defenses.convergence import METADATA_KEY, reference
from leakshield.defenses.loda.calibration import calibrated_c
from leakshield.defenses.loda.encoder import eq4_objective, obscure
from leakshield.defenses.loda.extractor import ExtractorParams, feature_map, fitted_extractor
from leakshield.errors import ConfigError


class LodaParams(ExtractorParams):
    """Eq. 4 — c: the pixel-distance weight. steps: T, the encoder's steps. step_size: τ, its normalized
    gradient step. chunk: images encoded at once (and per cached artifact). The extractor fields:
    ``ExtractorParams``. Presets (the paper's c; the layers scaled from ResNet-18's 20 convolutions to the
    default LeNet's 3): ``loda1`` (the first convolution, c 20; the paper: the first 5), ``loda2`` (all
    convolutions, c 30), ``loda3`` (the last convolution and the linear head, c 1). start_dataset,
    start_root: a registered dataset whose training images x′ starts from, read from ``start_root`` and
    converted to the clients' channels and size (the paper: CIFAR-100 for CIFAR-10 clients; None: the
    public split). calibrate_c: choose c for the extractor instead of taking ``c``: the smallest value of
    the grid whose obscured public images are far enough from their originals, recorded in every
    client's artifact as ``c`` (``leakshield.defenses.loda.calibration``). c_grid: the values tried, in
    increasing order. c_ssim: "far enough": a mean SSIM of x′ to x* at most this (default 0.1)."""

    c: float = pydantic.Field(default=20.0, ge=0)
    steps: int = pydantic.Field(default=500, ge=1)
    step_size: float = pydantic.Field(default=0.1, gt=0)
    chunk: int = pydantic.Field(default=256, ge=1)
    start_dataset: str | None = None
    start_root: str | None = None
    calibrate_c: bool = False
    c_grid: list[pydantic.PositiveFloat] = pydantic.Field(
        default_factory=lambda: [1.0, 2.0, 5.0, 10.0, 20.0, 30.0, 50.0, 100.0], min_length=1
    )
    c_ssim: float = pydantic.Field(default=0.1, gt=-1, lt=1)

    @pydantic.field_validator("start_dataset")
    @classmethod
    def _registered(cls, value: str | None) -> str | None:
        if value is not None and value not in list_datasets():
            raise ValueError(f"{value!r} is not a registered dataset; allowed: {', '.join(list_datasets())}")
        return value


@DEFENSES.register(
    "loda",
    summary="LODA: clients train on obscured images (features of a public extractor kept, pixel distance "
    "maximized, Eq. 4) [first conv of a public tanh LeNet, c 20, 500 steps of τ 0.1; loda1/2/3]",
    reference="Wan et al., Defense Against Gradient Leakage Attacks via Learning to Obscure Data, 2022, "
    "Eq. 4, Algorithm 1",
    params=LodaParams,
    aliases={
        "loda1": {"layers": "first", "count": 1, "c": 20.0},
        "loda2": {"layers": "all", "c": 30.0},
        "loda3": {"layers": "last", "count": 1, "linear": True, "c": 1.0},
    },
)
class Loda(Defense):
    """Data stage: each image of a minibatch is replaced by its obscured version (client artifact)."""

    params: LodaParams
    fit_scope: ClassVar[FitScope | None] = "client"

    def fit(self, data: FitData) -> Artifact:
        if data.public is None or not len(data.public):
            raise ConfigError("loda: needs the public split (the extractor and the starting images); "
                              "set dataset.public_fraction above 0")  # fmt: skip
        p = self.params
        net = fitted_extractor(p, data.info, data.public, data.seed, data.cache, data.device)
        g = feature_map(net, p)
        c = loda_c(p, data.info, data.public, data.seed, data.cache, data.device)
        private = data.data.x.to(data.device)
        pool = start_pool(p, data.info, data.public)
        gen = torch.Generator().manual_seed(data.seed)
        picks = torch.randint(len(pool), (len(private),), generator=gen)
        starts = pool.x[picks].to(data.device)
        chunks = []
        fields = p.model_dump(mode="json")
        for start in tqdm(range(0, len(private), p.chunk), desc="LODA chunks", disable=not data.progress):
            block = slice(start, start + p.chunk)
            key = FitKey("loda:chunk", {**fields, "start": start}, "client", data_fingerprint(data.data),
                         data.seed, context={"public": data_fingerprint(data.public),
                                             "starts": data_fingerprint(pool)})  # fmt: skip

            def encode(b: slice = block) -> Artifact:
                out = obscure(g, private[b], starts[b], data.info, c=c, steps=p.steps, lr=p.step_size)
                return Artifact({"obscured": out.cpu()})

            artifact = data.cache.get_or_fit(key, encode) if data.cache is not None else encode()
            chunks.append(artifact.tensors["obscured"])
        obscured = torch.cat(chunks)
        probe = slice(0, PROBE_IMAGES)
        criterion = encoder_convergence(p, g, private[probe], starts[probe], obscured[probe].to(data.device),
                                        data.info, c)  # fmt: skip
        return Artifact({"obscured": obscured}, {"images": len(private), "c": c, METADATA_KEY: criterion})

    def data_hook(
        self, x: torch.Tensor, y: torch.Tensor, context: ClientContext
    ) -> tuple[torch.Tensor, torch.Tensor]:
        if context.artifact is None:
            raise RuntimeError("loda needs the client's fitted artifact (its obscured dataset)")
        obscured = context.artifact.tensors["obscured"]
        fresh = lambda i: self._encode_fresh(x[i], context)  # noqa: E731
        return swap_in(context.dataset.x, obscured, x, fresh, context.indices), y

    def _encode_fresh(self, images: torch.Tensor, context: ClientContext) -> torch.Tensor:
        """Encode images outside the client's dataset (seeded by their pixels)."""
        if context.public is None:
            raise ConfigError("loda: an image outside the client's dataset needs the public split")
        p = self.params
        net = fitted_extractor(p, context.info, context.public, context.seed, context.cache, images.device)
        seed = int(hashlib.sha256(images.detach().cpu().numpy().tobytes()).hexdigest()[:8], 16)
        pool = start_pool(p, context.info, context.public)
        picks = torch.randint(len(pool), (len(images),), generator=torch.Generator().manual_seed(seed))
        starts = pool.x[picks].to(images.device)
        c = loda_c(p, context.info, context.public, context.seed, context.cache, images.device)
        return obscure(feature_map(net, p), images, starts, context.info, c=c, steps=p.steps, lr=p.step_size)


#: private images of a client on which the encoder's objective is compared with the paper's budget
PROBE_IMAGES = 8
#: the paper's encoder budget T (Sec. 5.1)
PAPER_STEPS = 500


def encoder_convergence(
    params: LodaParams,
    g: Callable[[torch.Tensor], torch.Tensor],
    private: torch.Tensor,
    starts: torch.Tensor,
    obscured: torch.Tensor,
    info: DatasetInfo,
    c: float,
) -> dict[str, Any]:
    """The encoder's convergence (``reference`` kind): Eq. 4's objective of the run's obscured images
    against the same images encoded with the paper's T = 500 steps (a probe of a few images)."""
    if params.steps >= PAPER_STEPS:
        at_paper = obscured
    else:
        at_paper = obscure(g, private, starts, info, c=c, steps=PAPER_STEPS, lr=params.step_size)
    start, value, compare = (eq4_objective(g, x, private, info, c) for x in (starts, obscured, at_paper))
    objective = f"the encoder's Eq. 4 objective, {len(private)} images"
    return reference("loda", objective, params.steps, PAPER_STEPS, start, value, compare).as_json()


def loda_c(
    params: LodaParams,
    info: DatasetInfo,
    public: ImageSet,
    seed: int,
    cache: ArtifactCache | None,
    device: torch.device,
) -> float:
    """The c the encoder uses: ``params.c``, or with ``calibrate_c`` the value calibrated on the public
    split for this extractor (public, so the adaptive attack computes the same)."""
    if not params.calibrate_c:
        return params.c
    c, _ = calibrated_c(params, list(params.c_grid), params.c_ssim, params.steps, params.step_size, info,
                        public, seed, cache, device)  # fmt: skip
    return c


def start_pool(params: LodaParams, info: DatasetInfo, public: ImageSet) -> ImageSet:
    """The images x′ starts from: ``params.start_dataset``'s training images in the clients' channels and
    size, or the public split."""
    if params.start_dataset is None:
        return public
    channels, size, _ = info.shape
    return _dataset_images(params.start_dataset, params.start_root, channels, size)


@functools.lru_cache(maxsize=2)
def _dataset_images(name: str, root: str | None, channels: int, size: int) -> ImageSet:
    splits = load_dataset(name, {"channels": channels, "size": size, "public_fraction": 0.0}, root=root)
    return ImageSet(splits.train.x, splits.train.y)
