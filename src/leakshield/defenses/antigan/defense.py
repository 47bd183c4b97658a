"""The Anti-GAN defense (Luo & Zhang, *Exploiting Defenses against GAN-Based Feature Inference Attacks
in Federated Learning*, TKDD 2025, Sec. 4 and Algorithm 1): each defended client trains on X̂, a mix of
its real images with images of its own CGAN whose visual details are obfuscated.

A client fit, from that client's data only: (1) a CGAN whose discriminator sees the feature maps C(x) of
a fixed low-level extractor (Eq. 3: the first convolution of a network trained on the public split, or
of user weights), trained to ``cgan_steps``; (2) fine-tuned for ``finetune_steps`` with λ·L_obf added to
the generator's loss (Eq. 4, the window-variance loss of Eq. 2); (3) one generated image x′ of the same
class per real image and x̂ = μ·x + (1 − μ)·x′. Both GAN stages are checkpointed artifacts: an
interrupted fit resumes, and fits that share a stage (a sweep over v_e reuses stage 1; a sweep over μ
reuses stages 1 and 2) compute it once. The data stage swaps each minibatch image for its x̂.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from typing import Any, ClassVar, Literal

import pydantic
import torch
from torch import nn

from leakshield.artifacts import Artifact, FitData, FitKey, FitScope, data_fingerprint
from leakshield.data.lookup import swap_in
from leakshield.data.types import DatasetInfo, ImageSet
from leakshield.defenses.antigan.obfuscation import revised_mixup, window_variance_loss
from leakshield.defenses.base import DEFENSES, ClientContext, Defense
from leakshield.defenses.convergence import METADATA_KEY, Convergence, plateau, tail_steps
from leakshield.defenses.loda.extractor import ExtractorParams, fitted_extractor
from leakshield.errors import ConfigError
from leakshield.generative import ConditionalDiscriminator, ConditionalGenerator, GANSchedule, GANState
from leakshield.generative.training import CheckpointStore, freeze, train_cgan
from leakshield.registry import Params


class AntiGanParams(Params):
    """variance: v_e, the expected window variance of Eq. 2 on the [−1, 1] scale (the paper's 0.5). window:
    the window side s (4). weight: λ of Eq. 4 (250). reduction: how Eq. 2's window terms combine, ``sum``
    or ``mean``. mix: μ of the mixup (0.5). cgan_steps, finetune_steps: the two training stages, in
    generator updates. batch_size: images per update. lr: Adam's step (1e-4 as in the paper). width: the
    generator's last hidden width (Table 4: 64). checkpoint_every: steps between checkpoints and sample
    grids. extractor, extractor_params, extractor_weights, extractor_epochs: the network whose first
    convolution is C (trained on the public split, or read from a local .safetensors file; the paper:
    ImageNet ResNet-18's first convolution)."""

    variance: float = pydantic.Field(default=0.5, ge=0)
    window: int = pydantic.Field(default=4, ge=2)
    weight: float = pydantic.Field(default=250.0, ge=0)
    reduction: Literal["sum", "mean"] = "sum"
    mix: float = pydantic.Field(default=0.5, ge=0, le=1)
    cgan_steps: int = pydantic.Field(default=1500, ge=1)
    finetune_steps: int = pydantic.Field(default=500, ge=0)
    batch_size: int = pydantic.Field(default=64, ge=1)
    lr: float = pydantic.Field(default=1e-4, gt=0)
    width: int = pydantic.Field(default=64, ge=4)
    checkpoint_every: int = pydantic.Field(default=250, ge=1)
    extractor: str = "lenet"
    extractor_params: dict[str, Any] = pydantic.Field(
        default_factory=lambda: {"activation": "tanh", "init_range": None}
    )
    extractor_weights: str | None = None
    extractor_epochs: int = pydantic.Field(default=30, ge=0)

    def check_data(self, shape: tuple[int, int, int], num_classes: int) -> None:
        if self.window > min(shape[1:]):
            raise ValueError(f"window: {self.window} is larger than the {shape[1]}×{shape[2]} images "
                             "(Eq. 2 would have no window to score)")  # fmt: skip

    def extractor_config(self) -> ExtractorParams:
        return ExtractorParams(
            extractor=self.extractor,
            extractor_params=self.extractor_params,
            weights=self.extractor_weights,
            epochs=self.extractor_epochs,
        )


STAGE1_FIELDS = {"cgan_steps", "batch_size", "lr", "width", "checkpoint_every", "extractor",
                 "extractor_params", "extractor_weights", "extractor_epochs"}  # fmt: skip
STAGE2_FIELDS = STAGE1_FIELDS | {"variance", "window", "weight", "reduction", "finetune_steps"}


def first_convolution(net: nn.Module) -> nn.Conv2d:
    """C: the first convolution of ``net`` (Sec. 4.2), frozen."""
    conv = next((m for m in net.modules() if isinstance(m, nn.Conv2d)), None)
    if conv is None:
        raise ConfigError("antigan: the extractor has no convolutional layer for C(x)")
    return freeze(conv)


def build_networks(
    params: AntiGanParams, info: DatasetInfo, conv: nn.Conv2d, seed: int, device: torch.device
) -> tuple[ConditionalGenerator, ConditionalDiscriminator]:
    """The defender's generator (Table 4) and its discriminator on C(x) (Table 5), seeded."""
    channels, size, _ = info.shape
    with torch.no_grad():
        side = conv(torch.zeros(1, *info.shape, device=conv.weight.device)).shape[-1]
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        gen = ConditionalGenerator(channels, size, info.num_classes, width=params.width)
        disc = ConditionalDiscriminator(conv.out_channels, side, info.num_classes)
    return gen.to(device), disc.to(device)


@DEFENSES.register(
    "antigan",
    summary="Anti-GAN: clients train on μ·x + (1−μ)·G(z|y), G a CGAN judged on C(x) and fine-tuned to "
    "obfuscate 4×4-window variance (Eq. 2–4) [v_e 0.5, λ 250, μ 0.5]",
    reference="Luo & Zhang, Exploiting Defenses against GAN-Based Feature Inference Attacks in Federated "
    "Learning, TKDD 2025, Eq. 2–4, Algorithm 1",
    params=AntiGanParams,
)
class AntiGan(Defense):
    """Data stage: each minibatch image is replaced by its mixed image x̂ (client artifact)."""

    params: AntiGanParams
    fit_scope: ClassVar[FitScope | None] = "client"

    def fit(self, data: FitData) -> Artifact:
        if data.public is None or not len(data.public):
            raise ConfigError("antigan: needs the public split (to train the extractor C); "
                              "set dataset.public_fraction above 0")  # fmt: skip
        p, device = self.params, data.device
        conv = first_convolution(
            fitted_extractor(p.extractor_config(), data.info, data.public, data.seed, data.cache, device)
        )
        G, D = build_networks(p, data.info, conv, data.seed, device)
        state = GANState.create(G, D, GANSchedule(steps=1, lr=p.lr))
        private = ImageSet(data.data.x.to(device), data.data.y.to(device))
        fields = p.model_dump(mode="json")
        fingerprint = data_fingerprint(data.data)
        context = {"public": data_fingerprint(data.public), "shape": list(data.info.shape)}

        def store(stage: str, names: set[str]) -> CheckpointStore | None:
            if data.cache is None:
                return None
            key = FitKey(f"antigan:{stage}", {k: fields[k] for k in sorted(names)}, "client", fingerprint,
                         data.seed, context=context)  # fmt: skip
            return CheckpointStore(
                data.cache, key, data.cache.root / "samples" / f"antigan-{stage}-{key.digest[:12]}"
            )

        def features(x: torch.Tensor) -> torch.Tensor:
            return conv(data.info.normalize(x))

        def obfuscation(x: torch.Tensor) -> torch.Tensor:
            return window_variance_loss(x, p.variance, p.window, p.reduction)

        common = {"batch_size": p.batch_size, "lr": p.lr, "checkpoint_every": p.checkpoint_every}
        labels = torch.unique(private.y).repeat_interleave(MATCH_SAMPLES)

        def obfuscated() -> float:  # stage 2's own objective, L_obf on fixed latents
            generated = generate_like(G, labels, torch.Generator().manual_seed(data.seed))
            return window_variance_loss(generated, p.variance, p.window, p.reduction).item()

        stages = [(p.cgan_steps, None, 0.0, store("cgan", STAGE1_FIELDS), "Anti-GAN stage 1 (CGAN on C(x))",
                   "stage 1, its class moments' distance in C(x)",
                   lambda: feature_match(G, features, private, data.seed))]  # fmt: skip
        if p.finetune_steps:
            stages.append((p.cgan_steps + p.finetune_steps, obfuscation, p.weight,
                           store("finetune", STAGE2_FIELDS), "Anti-GAN stage 2 (λ·L_obf)",
                           "stage 2, L_obf of Eq. 2", obfuscated))  # fmt: skip
        criteria, begin = [], 0
        floor = public_match(features, data.public.to(device), private, data.seed)
        for end, extra, weight, checkpoints, desc, objective, probe in stages:
            # stage 2 is stopped at its tail steps to probe the generator there (the training is seeded
            # per step: the pieces equal one uninterrupted run)
            start, tail = probe(), {}
            stops = [begin + t for t in tail_steps(end - begin)] if extra is not None else []
            for stop in [*stops, end]:
                train_cgan(state, private, GANSchedule(steps=stop, **common), features=features,
                           extra_loss=extra, extra_weight=weight, seed=data.seed, checkpoints=checkpoints,
                           progress=data.progress, desc=desc)  # fmt: skip
                if stop < end:
                    tail[stop - begin] = probe()
            if extra is None:  # stage 1 against the public images of the client's classes
                criteria.append(Convergence(defense="antigan", objective=objective, kind="floor",
                                            steps=end - begin, compare_steps=end - begin, start=start,
                                            value=probe(), compare=floor,
                                            target="the public images of its classes"))  # fmt: skip
            else:
                criteria.append(plateau("antigan", objective, end - begin, start, probe(), tail))
            begin = end
        generated = generate_like(G, private.y, torch.Generator().manual_seed(data.seed))
        mixed = revised_mixup(private.x, generated, p.mix)
        tensors = {"mixed": mixed.cpu(), "generated": generated.cpu()}
        tensors.update({f"G.{k}": v.detach().cpu() for k, v in G.state_dict().items()})
        obf = window_variance_loss(generated, p.variance, p.window, p.reduction).item()
        return Artifact(tensors, {"images": len(private), "losses": state.losses, "obfuscation_loss": obf,
                                  METADATA_KEY: [c.as_json() for c in criteria]})  # fmt: skip

    def data_hook(
        self, x: torch.Tensor, y: torch.Tensor, context: ClientContext
    ) -> tuple[torch.Tensor, torch.Tensor]:
        if context.artifact is None:
            raise RuntimeError("antigan needs the client's fitted artifact (its mixed dataset)")
        mixed = context.artifact.tensors["mixed"]
        fresh = lambda i: self._mix_fresh(x[i], y[i], context)  # noqa: E731
        return swap_in(context.dataset.x, mixed, x, fresh, context.indices), y

    def _mix_fresh(self, x: torch.Tensor, y: torch.Tensor, context: ClientContext) -> torch.Tensor:
        """Images outside the client's dataset: mixed with the client's generator, seeded by the pixels."""
        assert context.artifact is not None
        info, p = context.info, self.params
        G = ConditionalGenerator(info.shape[0], info.shape[1], info.num_classes, width=p.width)
        G.load_state_dict({k[2:]: v for k, v in context.artifact.tensors.items() if k.startswith("G.")})
        seed = int(hashlib.sha256(x.detach().cpu().numpy().tobytes()).hexdigest()[:8], 16)
        generated = generate_like(G.to(x.device), y, torch.Generator().manual_seed(seed))
        return revised_mixup(x, generated, p.mix)


#: latents per class on which :func:`feature_match` compares the generator with the real class
MATCH_SAMPLES = 32


def feature_match(
    G: ConditionalGenerator,  # noqa: N803  (the paper's name)
    features: Callable[[torch.Tensor], torch.Tensor],
    data: ImageSet,
    seed: int,
) -> float:
    """How far the generator is from the client's classes where its discriminator looks: the
    :func:`class_moment_distance` of :data:`MATCH_SAMPLES` samples per class on fixed latents (Anti-GAN's
    convergence criterion)."""
    labels = torch.unique(data.y).repeat_interleave(MATCH_SAMPLES)
    generated = generate_like(G, labels, torch.Generator().manual_seed(seed)).to(data.x.device)
    return class_moment_distance(features, ImageSet(generated, labels.to(data.x.device)), data)


def public_match(
    features: Callable[[torch.Tensor], torch.Tensor], public: ImageSet, data: ImageSet, seed: int = 0
) -> float:
    """The level real images reach: the :func:`class_moment_distance` of up to :data:`MATCH_SAMPLES`
    public images per class the client holds (as many as the generator is judged on, drawn with
    ``seed``; classes the public split lacks are left out)."""
    gen = torch.Generator().manual_seed(seed)
    picks = []
    for c in torch.unique(data.y):
        rows = (public.y == c).nonzero().flatten()
        picks.append(rows[torch.randperm(len(rows), generator=gen)[:MATCH_SAMPLES].to(rows.device)])
    chosen = torch.cat(picks)
    return class_moment_distance(features, ImageSet(public.x[chosen], public.y[chosen]), data)


def class_moment_distance(
    features: Callable[[torch.Tensor], torch.Tensor], images: ImageSet, data: ImageSet
) -> float:
    """Per class of ``images``: (‖mean C(images_y) − mean C(data_y)‖ + ‖std C(images_y) − std C(data_y)‖)
    / ‖mean C(data_y)‖, the standard deviations per feature (a generator that collapses onto its class
    mean does not pass), averaged over the classes (lower is better)."""
    with torch.no_grad():
        mine, real = features(images.x).flatten(1), features(data.x).flatten(1)
        gaps = []
        for c in torch.unique(images.y):
            a, b = mine[images.y == c], real[data.y == c]
            spread = (a.std(0, correction=0) - b.std(0, correction=0)).norm()
            gaps.append(float(((a.mean(0) - b.mean(0)).norm() + spread) / b.mean(0).norm().clamp_min(1e-12)))
    return sum(gaps) / len(gaps)


def generate_like(
    G: ConditionalGenerator,  # noqa: N803  (the paper's name)
    labels: torch.Tensor,
    gen: torch.Generator,
) -> torch.Tensor:
    """One generated image per label (eval mode, in chunks of 256), latents drawn from ``gen``."""
    G.eval()
    out = []
    with torch.no_grad():
        for start in range(0, len(labels), 256):
            y = labels[start : start + 256]
            out.append(G(G.latent(len(y), gen), y))
    return torch.cat(out) if out else torch.empty(0, G.channels, G.size, G.size)
