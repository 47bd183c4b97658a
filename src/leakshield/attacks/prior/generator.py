"""The generative prior of GGL: a conditional generator trained on the public split, cached.

GGL (Li et al., CVPR 2022, Sec. 3) assumes a generator "trained on public data" of the victims'
distribution. Nothing is downloaded here: the generator is leakshield's conditional DCGAN
(:mod:`leakshield.generative`, the networks of Anti-GAN's Tables 4–5 with the discriminator on pixels),
trained by the resumable trainer on the dataset's public split and stored as a content-addressed
artifact keyed by these settings and the public data only, so every GGL variant, step budget and model of
a run shares one generator. ``weights`` loads a user's own generator instead (a local safetensors file
of the same architecture).
"""

from __future__ import annotations

from pathlib import Path

import pydantic
import torch

from leakshield.artifacts import Artifact, ArtifactCache, FitKey, data_fingerprint
from leakshield.data.types import DatasetInfo, ImageSet
from leakshield.errors import ConfigError
from leakshield.generative import ConditionalDiscriminator, ConditionalGenerator, GANSchedule, GANState
from leakshield.generative.training import CheckpointStore, train_cgan
from leakshield.registry import Params
from leakshield.weights import load_weights


class GeneratorPriorParams(Params):
    """generator_steps: GAN training steps on the public split (one D and one G update each);
    generator_width: channels of G's last hidden layer (Anti-GAN Table 4: 64); generator_batch,
    generator_lr: minibatch and Adam step size (β₁ 0.5); latent_dim: the size of z (GGL: 128);
    generator_checkpoint_every: steps between resumable checkpoints; generator_weights: a local
    safetensors file of a trained generator of this architecture (skips the training)."""

    generator_steps: int = pydantic.Field(default=3000, ge=1)
    generator_width: int = pydantic.Field(default=64, ge=4)
    generator_batch: int = pydantic.Field(default=64, ge=2)
    generator_lr: float = pydantic.Field(default=2e-4, gt=0)
    latent_dim: int = pydantic.Field(default=128, ge=1)
    generator_checkpoint_every: int = pydantic.Field(default=500, ge=1)
    generator_weights: str | None = None

    @pydantic.field_validator("generator_weights")
    @classmethod
    def _weights_file_exists(cls, value: str | None) -> str | None:
        if value is not None and not Path(value).expanduser().is_file():
            raise ValueError(f"no file {value}")
        return value


PRIOR_FIELDS = set(GeneratorPriorParams.model_fields)


def build_generator(params: GeneratorPriorParams, info: DatasetInfo) -> ConditionalGenerator:
    """An untrained generator of ``params``' architecture for ``info``'s images."""
    channels, size = info.shape[0], info.shape[1]
    return ConditionalGenerator(
        channels, size, info.num_classes, latent_dim=params.latent_dim, width=params.generator_width
    )


def fitted_generator(
    params: GeneratorPriorParams,
    info: DatasetInfo,
    public: ImageSet | None,
    seed: int,
    cache: ArtifactCache | None,
    device: torch.device,
    progress: bool = False,
) -> ConditionalGenerator:
    """The prior of ``params`` in eval mode: from ``generator_weights``, else trained on ``public``
    (resuming from the cache's latest checkpoint; sample grids under ``<cache>/samples/``)."""
    generator = build_generator(params, info)
    if params.generator_weights is not None:
        load_weights(generator, params.generator_weights, "generator_weights")
        return generator.to(device).eval()
    if public is None or not len(public):
        raise ConfigError("ggl: needs the public split to train its generator; set dataset.public_fraction "
                          "above 0 or give generator_weights")  # fmt: skip
    fields = params.model_dump(mode="json", exclude={"generator_weights"})
    key = FitKey("ggl:generator", fields, "public", data_fingerprint(public), seed,
                 context={"shape": list(info.shape), "classes": info.num_classes})  # fmt: skip

    def fit() -> Artifact:
        torch.manual_seed(seed)  # the networks' initialization
        G = build_generator(params, info).to(device)
        D = ConditionalDiscriminator(info.shape[0], info.shape[1], info.num_classes).to(device)
        schedule = GANSchedule(
            steps=params.generator_steps,
            batch_size=params.generator_batch,
            lr=params.generator_lr,
            checkpoint_every=params.generator_checkpoint_every,
        )
        store = None
        if cache is not None:
            samples = cache.root / "samples" / f"ggl-generator-{key.digest[:12]}"
            store = CheckpointStore(cache, key, samples)
        state = GANState.create(G, D, schedule)
        train_cgan(state, public.to(device), schedule, seed=seed, checkpoints=store, progress=progress,
                   desc="GGL prior (CGAN on the public split)")  # fmt: skip
        return Artifact({k: v.detach().cpu() for k, v in G.state_dict().items()}, {"losses": state.losses})

    with torch.random.fork_rng(devices=[]):
        artifact = cache.get_or_fit(key, fit) if cache is not None else fit()
    generator.load_state_dict(dict(artifact.tensors))
    return generator.to(device).eval()
