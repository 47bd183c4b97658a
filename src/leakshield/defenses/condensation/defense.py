"""Training on condensed or synthetic data (ATS, Gao et al., Sec. 5.3, Table 5): each defended client
condenses its own dataset once (a client-side fitted artifact, resumable from checkpoints) and trains
only on the result: the data stage swaps every minibatch image for a synthetic image of its class (drawn
with the client's generator), so every update the server sees is a gradient of synthetic data.

``dc`` (gradient matching), ``dsa`` (gradient matching with siamese augmentation), ``dm`` (distribution
matching) learn ``ipc`` images per class; ``dp-merf`` trains a generator on a DP mean embedding and
draws ``ipc`` images per class from it (ε reported).
"""

from __future__ import annotations

from typing import ClassVar, Literal

import pydantic
import torch

from leakshield.artifacts import Artifact, FitData, FitKey, FitScope, data_fingerprint
from leakshield.data.types import ImageSet
from leakshield.defenses.base import DEFENSES, ClientContext, Defense, Participation
from leakshield.defenses.condensation.dpmerf import (
    FeatureGenerator,
    FourierFeatures,
    gaussian_release,
    labelled_embedding,
    median_distance,
    noise_multiplier,
    release_epsilon,
)
from leakshield.defenses.condensation.gswgan import (
    GSWGANBudget,
    steps_within,
    subsampled_epsilon,
    train_gswgan,
)
from leakshield.defenses.condensation.matching import (
    MatchingSetup,
    SyntheticSet,
    distribution_matching_iteration,
    distribution_probe,
    gradient_matching_iteration,
    gradient_probe,
)
from leakshield.defenses.condensation.synthetic import Checkpoints, real_start, resumable
from leakshield.defenses.convergence import METADATA_KEY, plateau, tail_steps
from leakshield.errors import ConfigError
from leakshield.generative import ConditionalGenerator
from leakshield.registry import Params

#: DC's (outer_loop, inner_loop) by images per class (the reference's table)
DC_LOOPS = ((1, (1, 1)), (10, (10, 50)), (20, (20, 25)), (30, (30, 20)), (40, (40, 15)))


class CondensationParams(Params):
    """ipc: synthetic images per class (ATS Table 5: 50; a class the client holds fewer of keeps its
    count); width, depth: the ConvNet condensed with (the papers: 128, 3); iterations: outer iterations,
    each with a fresh network; lr_images: SGD step on the images (momentum 0.5); batch_real: real images
    per class per step; checkpoint_every: iterations between resumable checkpoints; init: the start,
    ``real`` images of the class (the papers' default) or uniform ``noise``."""

    ipc: int = pydantic.Field(default=50, ge=1)
    init: Literal["real", "noise"] = "real"
    width: int = pydantic.Field(default=128, ge=1)
    depth: int = pydantic.Field(default=3, ge=1)
    iterations: int = pydantic.Field(default=1000, ge=1)
    lr_images: float = pydantic.Field(default=0.1, gt=0)
    batch_real: int = pydantic.Field(default=256, ge=1)
    checkpoint_every: int = pydantic.Field(default=10, ge=1)

    def check_data(self, shape: tuple[int, int, int], num_classes: int) -> None:
        side = min(shape[1:])
        if side >> self.depth < 1:  # each block halves the side (2×2 average pooling)
            deepest = side.bit_length() - 1
            raise ValueError(f"depth: {self.depth} halves {side}-pixel images below one pixel; "
                             f"allowed: 1..{deepest}")  # fmt: skip


class GradientMatchingParams(CondensationParams):
    """DC/DSA (Zhao et al., Algorithm 1) — outer_loop, inner_loop: the loops of Algorithm 1 (None: the
    reference's table by ipc, 50 images → 50 and 10). lr_net: the network's SGD step (0.01). batch_train:
    synthetic images per network step (256)."""

    outer_loop: int | None = pydantic.Field(default=None, ge=1)
    inner_loop: int | None = pydantic.Field(default=None, ge=0)
    lr_net: float = pydantic.Field(default=0.01, gt=0)
    batch_train: int = pydantic.Field(default=256, ge=1)

    def loops(self) -> tuple[int, int]:
        table = next((loops for ipc, loops in DC_LOOPS if self.ipc <= ipc), (50, 10))
        return self.outer_loop or table[0], self.inner_loop if self.inner_loop is not None else table[1]


class DistributionMatchingParams(CondensationParams):
    """DM (Zhao & Bilen, WACV 2023): 20,000 iterations, lr_images 1.0 (the paper's)."""

    iterations: int = pydantic.Field(default=20_000, ge=1)
    lr_images: float = pydantic.Field(default=1.0, gt=0)
    checkpoint_every: int = pydantic.Field(default=500, ge=1)


class DPMerfParams(Params):
    """DP-MERF (Harder et al.) — epsilon, delta: the (ε, δ) of the one noisy release. features: D, the
    number of random Fourier features (even). lengthscale: ℓ (None: the median heuristic on the client's
    data, which DP-MERF also computes on the private data). code: latent size of the generator. steps,
    batch, lr: its Adam training. ipc: images drawn per class."""

    epsilon: float = pydantic.Field(default=1.0, gt=0)
    delta: float = pydantic.Field(default=1e-5, gt=0, lt=1)
    features: int = pydantic.Field(default=10_000, ge=2)
    lengthscale: float | None = pydantic.Field(default=None, gt=0)
    code: int = pydantic.Field(default=5, ge=1)
    steps: int = pydantic.Field(default=2000, ge=1)
    batch: int = pydantic.Field(default=200, ge=2)
    lr: float = pydantic.Field(default=0.01, gt=0)
    ipc: int = pydantic.Field(default=50, ge=1)


class GSWGANParams(Params):
    """GS-WGAN (Chen et al.) — target_epsilon, delta: the (ε, δ) budget. sigma, clip: σ and C of the
    sanitized gradient (the paper: 1.07, 1). shards: critics K, each on 1/K of the client's data (the
    paper: 1,000 for 60,000 MNIST images; 50 here for a client's few hundred). critic_steps: critic updates
    per generator step (5). pretrain_steps: updates per critic before the generator trains (the paper:
    2,000). batch, lr: Adam's batch and step, β (0.5, 0.9). max_steps: a cap on generator steps (None: as
    many as the ε budget allows). width: the generator's (Anti-GAN Table 4 networks). critic_widths: the
    critics' widths. ipc: images drawn per class."""

    target_epsilon: float = pydantic.Field(default=10.0, gt=0)
    delta: float = pydantic.Field(default=1e-5, gt=0, lt=1)
    sigma: float = pydantic.Field(default=1.07, gt=0)
    clip: float = pydantic.Field(default=1.0, gt=0)
    shards: int = pydantic.Field(default=50, ge=1)
    critic_steps: int = pydantic.Field(default=5, ge=1)
    pretrain_steps: int = pydantic.Field(default=2000, ge=0)
    batch: int = pydantic.Field(default=32, ge=1)
    lr: float = pydantic.Field(default=1e-4, gt=0)
    max_steps: int | None = pydantic.Field(default=None, ge=1)
    width: int = pydantic.Field(default=64, ge=4)
    critic_widths: tuple[pydantic.PositiveInt, ...] = pydantic.Field(default=(64, 128, 256), min_length=1)
    ipc: int = pydantic.Field(default=50, ge=1)

    def steps(self) -> int:
        """Generator steps: the most whose ε stays within the target, capped by ``max_steps``."""
        return steps_within(
            self.target_epsilon, self.sigma, 1 / self.shards, self.delta, self.max_steps or 10**6
        )

    def epsilon(self) -> float:
        return subsampled_epsilon(self.sigma, 1 / self.shards, self.steps(), self.delta)


class CondensedData(Defense):
    """Data stage: each minibatch image → a synthetic image of its class from the client's artifact."""

    fit_scope: ClassVar[FitScope | None] = "client"

    def condense(self, data: FitData) -> tuple[ImageSet, dict]:
        raise NotImplementedError

    def fit(self, data: FitData) -> Artifact:
        if not len(data.data):
            return Artifact({"x": torch.zeros(0, *data.info.shape), "y": torch.zeros(0, dtype=torch.long)})
        synthetic, metadata = self.condense(data)
        return Artifact({"x": synthetic.x.detach().cpu(), "y": synthetic.y.cpu()}, metadata)

    def checkpoints(self, data: FitData, every: int) -> Checkpoints:
        # without the budget: a longer run resumes from a shorter one's checkpoints (every iteration is
        # seeded by its number, so the result equals an uninterrupted run)
        fields = self.params.model_dump(mode="json", exclude={"iterations", "checkpoint_every"})
        key = FitKey(f"{self.name}:progress", fields, "client", data_fingerprint(data.data), data.seed)
        return Checkpoints(data.cache, key, every)

    def data_hook(
        self, x: torch.Tensor, y: torch.Tensor, context: ClientContext
    ) -> tuple[torch.Tensor, torch.Tensor]:
        if context.artifact is None:
            raise RuntimeError(f"{self.name} needs the client's fitted artifact (its synthetic set)")
        sx, sy = context.artifact.tensors["x"].to(x.device), context.artifact.tensors["y"].to(y.device)
        out = x.clone()
        for c in torch.unique(y).tolist():
            pool = (sy == c).nonzero().flatten()
            rows = (y == c).nonzero().flatten()
            if not len(pool):
                raise ValueError(f"{self.name}: class {c} is not in the client's synthetic set")
            pick = torch.randint(len(pool), (len(rows),), generator=context.generator).to(pool.device)
            out[rows] = sx[pool[pick]]
        return out, y


class MatchedSet(CondensedData):
    """DC, DSA and DM: synthetic images learned from ``ipc`` real ones per class."""

    augment: ClassVar[bool] = False

    def condense(self, data: FitData) -> tuple[ImageSet, dict]:
        p = self.params
        real = data.data.to(data.device)
        gen = torch.Generator().manual_seed(data.seed)
        start = real_start(real, p.ipc, gen)
        if p.init == "noise":
            start = ImageSet(torch.rand(start.x.shape, generator=gen).to(start.x.device), start.y)
        syn = SyntheticSet.start(start)
        setup = MatchingSetup(data.info, p.width, p.depth, p.batch_real, self.augment, data.seed)
        last: dict[str, float] = {}

        def advance(step: int) -> dict[str, float]:
            last["loss"] = self.iterate(setup, real, syn, step)
            return last

        # stopped at its tail steps to probe the set there (every iteration is seeded by its number: the
        # pieces equal one uninterrupted run)
        probe = lambda: self.probe(setup, real, syn)  # noqa: E731
        start, tail, done = probe(), {}, 0
        for stop in [*tail_steps(p.iterations), p.iterations]:
            resumable(stop, syn.state(), advance, self.checkpoints(data, p.checkpoint_every),
                      desc=f"{self.name} condensation", progress=data.progress, start=done)  # fmt: skip
            if stop < p.iterations:
                tail[stop] = probe()
            done = stop
        objective = f"its {self.objective} on fixed networks"
        criterion = plateau(self.name, objective, p.iterations, start, probe(), tail)
        return ImageSet(syn.x, syn.y), {"images": len(syn.x), "loss": last.get("loss", float("nan")),
                                        METADATA_KEY: criterion.as_json()}  # fmt: skip

    #: what :meth:`probe` measures (the convergence criterion's objective)
    objective: ClassVar[str] = "gradient-matching distance"

    def probe(self, setup: MatchingSetup, real: ImageSet, syn: SyntheticSet) -> float:
        return gradient_probe(setup, real, syn)

    def iterate(self, setup: MatchingSetup, real: ImageSet, syn: SyntheticSet, step: int) -> float:
        p = self.params
        outer, inner = p.loops()
        return gradient_matching_iteration(setup, real, syn, step, outer=outer, inner=inner,
                                           lr_images=p.lr_images, lr_net=p.lr_net,
                                           batch_train=p.batch_train)  # fmt: skip


REFERENCE_ATS = "ATS (Gao et al.), Sec. 5.3, Table 5"


@DEFENSES.register(
    "dc",
    summary="dataset condensation (gradient matching): the client trains on ipc synthetic images per class "
    "learned so that their gradients match its real data's [ipc 50, ConvNet-3 128, 1000 iterations]",
    reference=f"Zhao, Mopuri & Bilen, Dataset Condensation with Gradient Matching, ICLR 2021; "
    f"{REFERENCE_ATS}",
    params=GradientMatchingParams,
)
class DatasetCondensation(MatchedSet):
    params: GradientMatchingParams


@DEFENSES.register(
    "dsa",
    summary="DC with differentiable siamese augmentation (the same augmentation on real and synthetic "
    "batches) [ipc 50, ConvNet-3 128, 1000 iterations]",
    reference=f"Zhao & Bilen, Dataset Condensation with Differentiable Siamese Augmentation, ICML 2021; "
    f"{REFERENCE_ATS}",
    params=GradientMatchingParams,
)
class SiameseAugmentedCondensation(MatchedSet):
    params: GradientMatchingParams
    augment: ClassVar[bool] = True


@DEFENSES.register(
    "dm",
    summary="distribution matching: synthetic images whose mean embeddings under random networks match the "
    "real data's, per class [ipc 50, ConvNet-3 128, 20,000 iterations, lr 1]",
    reference=f"Zhao & Bilen, Dataset Condensation with Distribution Matching, WACV 2023; {REFERENCE_ATS}",
    params=DistributionMatchingParams,
)
class DistributionMatching(MatchedSet):
    params: DistributionMatchingParams
    augment: ClassVar[bool] = True

    objective: ClassVar[str] = "embedding distance"

    def iterate(self, setup: MatchingSetup, real: ImageSet, syn: SyntheticSet, step: int) -> float:
        return distribution_matching_iteration(setup, real, syn, step, lr_images=self.params.lr_images)

    def probe(self, setup: MatchingSetup, real: ImageSet, syn: SyntheticSet) -> float:
        return distribution_probe(setup, real, syn)


@DEFENSES.register(
    "dp-merf",
    summary="DP-MERF: the client trains on images drawn from a generator fit to an (ε, δ)-DP mean embedding "
    "of its data in random Fourier features [ε 1, δ 1e-5, 10,000 features, ipc 50]",
    reference=f"Harder, Adamczewski & Park, DP-MERF, AISTATS 2021; {REFERENCE_ATS}",
    params=DPMerfParams,
)
class DPMerf(CondensedData):
    params: DPMerfParams

    def condense(self, data: FitData) -> tuple[ImageSet, dict]:
        p, device, info = self.params, data.device, data.info
        gen = torch.Generator().manual_seed(data.seed)
        real = data.data.to(device)
        scale = p.lengthscale or median_distance(real.x, gen)
        phi = FourierFeatures(int(torch.tensor(info.shape).prod()), p.features - p.features % 2, scale, gen)
        phi = phi.to(device)
        sigma = noise_multiplier(p.epsilon, p.delta)
        clean = labelled_embedding(phi, real, info.num_classes)
        noisy, applied = gaussian_release(clean, 2 / len(real), sigma, gen)  # Δ = 2/m (Sec. 3)
        classes, counts = torch.unique(real.y, return_counts=True)
        weights = counts.float() / counts.sum()
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(data.seed)
            G = FeatureGenerator(info, p.code).to(device)
        opt = torch.optim.Adam(G.parameters(), lr=p.lr)
        schedule = torch.optim.lr_scheduler.StepLR(opt, step_size=max(1, p.steps // 5), gamma=0.5)
        G.train()
        for _ in range(p.steps):
            y = classes[torch.multinomial(weights, p.batch, replacement=True, generator=gen)].to(device)
            z = torch.randn(p.batch, p.code, generator=gen).to(device)
            emb = phi(G(z, y)).T @ torch.nn.functional.one_hot(y, info.num_classes).float() / p.batch
            loss = ((emb - noisy) ** 2).sum()
            opt.zero_grad()
            loss.backward()
            opt.step()
            schedule.step()
        G.eval()
        y = classes.repeat_interleave(p.ipc).to(device)
        with torch.no_grad():
            x = G(torch.randn(len(y), p.code, generator=gen).to(device), y)
        spent = release_epsilon(sigma, p.delta)
        return ImageSet(x, y), {
            "images": len(x),
            "loss": float(loss.detach()),
            "epsilon": spent,
            "sigma": sigma,
            "sigma_applied": applied,  # measured on the release: σ if the noise was added as stated
        }

    def privacy_spent(
        self, client_steps: dict, participation: Participation | None = None
    ) -> dict[str, float]:
        """The one release of each client's embedding: ε of σ at sampling rate 1."""
        p = self.params
        return {
            "epsilon": release_epsilon(noise_multiplier(p.epsilon, p.delta), p.delta),
            "delta": p.delta,
        }


@DEFENSES.register(
    "gs-wgan",
    summary="GS-WGAN: the client trains on images drawn from a conditional WGAN whose generator only gets "
    "clipped, noised gradients through one of K critics per step [ε 10, σ 1.07, C 1, 50 critics, ipc 50]",
    reference=f"Chen, Orekondy & Fritz, GS-WGAN, NeurIPS 2020; {REFERENCE_ATS}",
    params=GSWGANParams,
)
class GSWGAN(CondensedData):
    params: GSWGANParams

    def condense(self, data: FitData) -> tuple[ImageSet, dict]:
        p, info = self.params, data.info
        real = data.data.to(data.device)
        if len(real) < p.shards:
            raise ConfigError(f"shards: {p.shards} critics need at least as many images; the client has "
                              f"{len(real)}")  # fmt: skip
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(data.seed)
            G = ConditionalGenerator(info.shape[0], info.shape[1], info.num_classes, width=p.width)
        G = G.to(data.device).train()
        budget = GSWGANBudget(p.shards, p.sigma, p.clip, p.critic_steps, p.pretrain_steps, p.batch, p.lr,
                              p.steps())  # fmt: skip
        losses = train_gswgan(G, real, budget, data.seed, p.critic_widths, data.progress)
        G.eval()
        y = torch.unique(real.y).repeat_interleave(p.ipc)
        with torch.no_grad():
            x = G(G.latent(len(y), torch.Generator().manual_seed(data.seed)), y)
        return ImageSet(x, y), {"images": len(x), "steps": budget.steps, "epsilon": p.epsilon(), **losses}

    def privacy_spent(
        self, client_steps: dict, participation: Participation | None = None
    ) -> dict[str, float]:
        """The generator's ε over its steps (subsampling rate 1/K): a fit's fact, the same per client."""
        return {"epsilon": self.params.epsilon(), "delta": self.params.delta}
