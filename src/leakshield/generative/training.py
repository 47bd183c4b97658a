"""Training a conditional GAN, resumably: the minibatch and the latents of step t are drawn from a
generator seeded by (seed, t), and every ``checkpoint_every`` steps the networks and both optimizers'
states are stored as a fitted artifact (safetensors, :class:`~leakshield.artifacts.ArtifactCache`), so an
interrupted training resumes from its last checkpoint and ends bit-identical to an uninterrupted one.

The stabilizers are those of the "ganhacks" list Anti-GAN cites (Sec. 4.3): images scaled to [−1, 1]
with a tanh generator, latents from a Gaussian, the non-saturating generator loss (maximize log D(G(z))),
separate all-real and all-fake batches for D, one-sided label smoothing (real targets 0.9), Adam with
β₁ = 0.5 and the paper's learning rate 1e-4.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import torch
from torch import nn
from torch.nn import functional as F
from tqdm.auto import tqdm

from leakshield.artifacts import Artifact, ArtifactCache, Checkpoints, FitKey
from leakshield.data.types import ImageSet
from leakshield.generative.networks import ConditionalDiscriminator, ConditionalGenerator


@dataclass(frozen=True)
class GANSchedule:
    """steps: generator updates (one discriminator update each) from the state's step to ``steps``;
    batch_size, Adam lr and betas; real_label: the smoothed target of real samples; checkpoint_every:
    steps between checkpoints (and sample grids)."""

    steps: int
    batch_size: int = 64
    lr: float = 1e-4
    betas: tuple[float, float] = (0.5, 0.999)
    real_label: float = 0.9
    checkpoint_every: int = 500


@dataclass
class GANState:
    """The generator, the discriminator, their Adam optimizers and the number of steps taken."""

    generator: ConditionalGenerator
    discriminator: ConditionalDiscriminator
    g_opt: torch.optim.Adam
    d_opt: torch.optim.Adam
    step: int = 0
    losses: dict[str, float] = field(default_factory=dict)
    #: per loss term, (sum, steps) since the last checkpoint boundary: the next ``losses`` average them,
    #: across calls on this state (a training stopped and continued averages as one run)
    pending: dict[str, tuple[float, int]] = field(default_factory=dict)

    @classmethod
    def create(
        cls, generator: ConditionalGenerator, discriminator: ConditionalDiscriminator, schedule: GANSchedule
    ) -> GANState:
        g_opt = torch.optim.Adam(generator.parameters(), lr=schedule.lr, betas=schedule.betas)
        d_opt = torch.optim.Adam(discriminator.parameters(), lr=schedule.lr, betas=schedule.betas)
        return cls(generator, discriminator, g_opt, d_opt)

    def tensors(self) -> dict[str, torch.Tensor]:
        """Everything needed to resume, as flat named tensors (safetensors holds no objects)."""
        out = {f"G.{k}": v for k, v in self.generator.state_dict().items()}
        out.update({f"D.{k}": v for k, v in self.discriminator.state_dict().items()})
        for prefix, opt in (("optG", self.g_opt), ("optD", self.d_opt)):
            for index, state in opt.state_dict()["state"].items():
                for name, value in state.items():
                    out[f"{prefix}.{index}.{name}"] = torch.as_tensor(value)
        out["step"] = torch.tensor(self.step)
        return {k: v.detach().cpu().clone() for k, v in out.items()}

    def load(self, tensors: dict[str, torch.Tensor]) -> None:
        """Restore from :meth:`tensors` (the loss averages start afresh)."""
        self.pending = {}
        device = self.generator.embed.weight.device
        self.generator.load_state_dict({k[2:]: v for k, v in tensors.items() if k.startswith("G.")})
        self.discriminator.load_state_dict({k[2:]: v for k, v in tensors.items() if k.startswith("D.")})
        for prefix, opt in (("optG", self.g_opt), ("optD", self.d_opt)):
            saved = opt.state_dict()
            states: dict[int, dict[str, torch.Tensor]] = {}
            for key, value in tensors.items():
                if key.startswith(prefix + "."):
                    _, index, name = key.split(".", 2)
                    states.setdefault(int(index), {})[name] = value if name == "step" else value.to(device)
            saved["state"] = states
            opt.load_state_dict(saved)
        self.step = int(tensors["step"])


@dataclass(frozen=True)
class CheckpointStore:
    """Checkpoints of one training in an artifact cache: the artifact of ``key`` with the step added to
    its context. ``samples``: a folder for the sample grid PNG written with each checkpoint (or None)."""

    cache: ArtifactCache
    key: FitKey
    samples: Path | None = None

    def at(self, step: int) -> FitKey:
        return Checkpoints(self.cache, self.key, 1).at(step)

    def latest(self, steps: int, every: int) -> dict[str, torch.Tensor] | None:
        """The tensors of the latest stored checkpoint at or before ``steps`` (None if there is none)."""
        found = Checkpoints(self.cache, self.key, every).latest(steps)
        return found[1] if found is not None else None

    def save(self, state: GANState) -> None:
        self.cache.save(self.at(state.step), _artifact(state))


def _artifact(state: GANState) -> Artifact:
    return Artifact(state.tensors(), {"step": state.step, "losses": dict(state.losses)})


def step_generator(seed: int, step: int) -> torch.Generator:
    return torch.Generator().manual_seed((seed * 1_000_003 + step) % (2**63 - 1))


def pixels_to_gan(x: torch.Tensor) -> torch.Tensor:
    """[0, 1] pixels → [−1, 1], the scale the GAN works on."""
    return x * 2 - 1


def sample_grid(generator: ConditionalGenerator, per_class: int = 8, seed: int = 0) -> torch.Tensor:
    """A fixed grid of samples, one row per class (rows × per_class images), in eval mode."""
    was = generator.training
    generator.eval()
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        z = generator.latent(per_class, gen)
        rows = []
        for c in range(generator.num_classes):
            y = torch.full((per_class,), c, dtype=torch.long, device=z.device)
            rows.append(generator(z, y).cpu())
    generator.train(was)
    return torch.stack(rows)


def write_sample_grid(generator: ConditionalGenerator, path: Path, seed: int = 0) -> None:
    """:func:`sample_grid` as a PNG file (one row per class)."""
    from leakshield.image_grid import image_grid, png_bytes

    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(png_bytes(image_grid(list(sample_grid(generator, seed=seed)))))


def train_cgan(
    state: GANState,
    data: ImageSet,
    schedule: GANSchedule,
    *,
    features: Callable[[torch.Tensor], torch.Tensor] | None = None,
    extra_loss: Callable[[torch.Tensor], torch.Tensor] | None = None,
    extra_weight: float = 0.0,
    seed: int = 0,
    checkpoints: CheckpointStore | None = None,
    progress: bool = False,
    desc: str = "CGAN",
) -> GANState:
    """Train ``state`` on ``data`` (pixels in [0, 1], labels) up to ``schedule.steps`` steps.

    ``features`` maps pixel images to the discriminator's input (default: scaled to [−1, 1]; Anti-GAN
    passes its feature extractor C, Eq. 3). ``extra_loss`` is a term on the generated pixels added to the
    generator's loss with ``extra_weight`` (Anti-GAN's λ·L_obf, Eq. 4). With ``checkpoints`` the training
    resumes from the latest stored checkpoint and stores one every ``checkpoint_every`` steps."""
    features = features or pixels_to_gan
    G, D = state.generator, state.discriminator
    device = G.embed.weight.device
    every = max(1, schedule.checkpoint_every)
    if checkpoints is not None and state.step < schedule.steps:
        found = checkpoints.latest(schedule.steps, every)
        if found is not None and int(found["step"]) > state.step:
            state.load(found)
    for opt in (state.g_opt, state.d_opt):
        for group in opt.param_groups:
            group["lr"], group["betas"] = schedule.lr, schedule.betas
    G.train()
    D.train()
    bar = tqdm(range(state.step, schedule.steps), desc=desc, disable=not progress, leave=False)
    for step in bar:
        gen = step_generator(seed, step)
        idx = torch.randint(len(data), (schedule.batch_size,), generator=gen)
        x, y = data.x[idx.to(data.x.device)].to(device), data.y[idx.to(data.y.device)].to(device)
        z = torch.randn(schedule.batch_size, G.latent_dim, generator=gen).to(device)
        fake = G(z, y)
        real_logit = D(features(x), y)
        fake_logit = D(features(fake.detach()), y)
        d_loss = F.binary_cross_entropy_with_logits(
            real_logit, torch.full_like(real_logit, schedule.real_label)
        ) + F.binary_cross_entropy_with_logits(fake_logit, torch.zeros_like(fake_logit))
        state.d_opt.zero_grad(set_to_none=True)
        d_loss.backward()
        state.d_opt.step()
        g_logit = D(features(fake), y)
        g_loss = F.binary_cross_entropy_with_logits(g_logit, torch.ones_like(g_logit))
        total = g_loss
        terms = {"d": d_loss.item(), "g": g_loss.item()}
        if extra_loss is not None and extra_weight:
            extra = extra_loss(fake)
            total = total + extra_weight * extra
            terms["extra"] = extra.item()
        state.g_opt.zero_grad(set_to_none=True)
        total.backward()
        state.g_opt.step()
        state.step = step + 1
        for k, v in terms.items():
            total_so_far, steps_so_far = state.pending.get(k, (0.0, 0))
            state.pending[k] = (total_so_far + v, steps_so_far + 1)
        if state.step % every == 0 or state.step == schedule.steps:
            state.losses = {k: total / steps for k, (total, steps) in state.pending.items()}
            if state.step % every == 0:
                state.pending = {}
            bar.set_postfix({k: f"{v:.3f}" for k, v in state.losses.items()})
            if checkpoints is not None:
                checkpoints.save(state)
                if checkpoints.samples is not None:
                    write_sample_grid(G, checkpoints.samples / f"step_{state.step:06d}.png", seed)
    return state


def freeze(module: nn.Module) -> nn.Module:
    """``module`` with gradients off (a fixed feature extractor)."""
    for p in module.parameters():
        p.requires_grad_(False)
    return module
