"""GS-WGAN (Chen, Orekondy & Fritz, NeurIPS 2020): a conditional Wasserstein GAN whose generator only ever
receives sanitized gradients.

The client's data is split into K disjoint shards, one critic (discriminator) each; critics are never
released. Every generator step draws one critic (a subsampling rate of 1/K per record), trains it
``critic_steps`` times (WGAN-GP, penalty 10, Adam 1e-4, β (0.5, 0.9)), and updates the generator
through it with the gradient w.r.t. each generated image clipped to norm C and perturbed by N(0, σ²C²)
(Sec. 3.2: the only path from private data to the generator). The generator's privacy is then that of
a subsampled Gaussian mechanism over the generator steps: ε by the RDP accountant DP-SGD uses, and the
number of steps is the largest that keeps ε within ``target_epsilon`` (optionally capped by
``max_steps`` on a small machine; the ε actually spent is what is reported).
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass

import torch
from torch import nn

from leakshield.data.types import ImageSet
from leakshield.generative import ConditionalDiscriminator, ConditionalGenerator


def subsampled_epsilon(sigma: float, rate: float, steps: int, delta: float) -> float:
    """ε after ``steps`` subsampled Gaussian steps (RDP accountant; silent about its order grid)."""
    from leakshield.defenses.dpsgd import dp_epsilon

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        return dp_epsilon(sigma, rate, steps, delta)


def steps_within(target: float, sigma: float, rate: float, delta: float, cap: int) -> int:
    """The most generator steps (≤ ``cap``) whose ε stays within ``target`` (bisection)."""
    if subsampled_epsilon(sigma, rate, cap, delta) <= target:
        return cap
    lo, hi = 0, cap
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if subsampled_epsilon(sigma, rate, mid, delta) <= target else (lo, mid)
    return lo


class SanitizedGradient(torch.autograd.Function):
    """Identity forward; backward clips each sample's incoming gradient to norm ``clip`` and adds
    N(0, (σ·clip)²) noise per sample (GS-WGAN Eq. 5)."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, clip: float, sigma: float, noise: torch.Tensor) -> torch.Tensor:
        ctx.clip, ctx.sigma = clip, sigma
        ctx.save_for_backward(noise)
        return x.view_as(x)

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        (noise,) = ctx.saved_tensors
        norms = grad.flatten(1).norm(dim=1).clamp_min(1e-12)
        factor = (ctx.clip / norms).clamp(max=1.0).view(-1, *([1] * (grad.dim() - 1)))
        return grad * factor + noise * (ctx.sigma * ctx.clip), None, None, None


def gradient_penalty(critic: nn.Module, real: torch.Tensor, fake: torch.Tensor, y: torch.Tensor,
                     gen: torch.Generator) -> torch.Tensor:  # fmt: skip
    """WGAN-GP's penalty (Gulrajani et al.): (‖∇ critic(x̃)‖ − 1)² at random interpolates x̃."""
    alpha = torch.rand(len(real), 1, 1, 1, generator=gen).to(real.device)
    mixed = (alpha * real + (1 - alpha) * fake).requires_grad_(True)
    (grad,) = torch.autograd.grad(critic(mixed, y).sum(), mixed, create_graph=True)
    return ((grad.flatten(1).norm(dim=1) - 1) ** 2).mean()


@dataclass
class GSWGANBudget:
    """shards K, σ, clip C, critic_steps, pretrain_steps (per critic, before the generator trains),
    batch, lr, and the number of generator ``steps``."""

    shards: int
    sigma: float
    clip: float
    critic_steps: int
    pretrain_steps: int
    batch: int
    lr: float
    steps: int


def train_gswgan(
    generator: ConditionalGenerator, data: ImageSet, budget: GSWGANBudget, seed: int,
    critic_widths: tuple[int, ...], progress: bool = False,
) -> dict[str, float]:  # fmt: skip
    """Train ``generator`` on ``data`` (pixels in [0, 1]) with sanitized gradients; returns the last losses.
    Generated labels are drawn uniformly from the client's classes (public, as in DP-MERF here)."""
    from tqdm.auto import tqdm

    G = generator
    gen = torch.Generator().manual_seed(seed)
    device = G.embed.weight.device
    order = torch.randperm(len(data), generator=gen)
    shards = [order[k :: budget.shards] for k in range(budget.shards)]
    channels, size = data.x.shape[1], data.x.shape[2]
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        critics = [ConditionalDiscriminator(channels, size, G.num_classes, widths=critic_widths).to(device)
                   for _ in range(budget.shards)]  # fmt: skip
    betas = (0.5, 0.9)
    critic_opts = [torch.optim.Adam(c.parameters(), lr=budget.lr, betas=betas) for c in critics]
    g_opt = torch.optim.Adam(G.parameters(), lr=budget.lr, betas=betas)
    losses: dict[str, float] = {}
    classes = torch.unique(data.y).cpu()  # the client's classes, treated as public (labels drawn uniformly)

    def critic_step(k: int) -> None:
        idx = shards[k][torch.randint(len(shards[k]), (budget.batch,), generator=gen)]
        x, y = data.x[idx].to(device) * 2 - 1, data.y[idx].to(device)
        with torch.no_grad():
            fake = G(G.latent(len(y), gen), y) * 2 - 1
        critic = critics[k]
        loss = critic(fake, y).mean() - critic(x, y).mean() + 10 * gradient_penalty(critic, x, fake, y, gen)
        critic_opts[k].zero_grad()
        loss.backward()
        critic_opts[k].step()
        losses["critic"] = float(loss.detach())

    for k in tqdm(range(budget.shards), desc="GS-WGAN critics (warm-up)", disable=not progress, leave=False):
        for _ in range(budget.pretrain_steps):
            critic_step(k)
    for _ in tqdm(range(budget.steps), desc="GS-WGAN generator", disable=not progress, leave=False):
        k = int(torch.randint(budget.shards, (1,), generator=gen))
        for _ in range(budget.critic_steps):
            critic_step(k)
        y = classes[torch.randint(len(classes), (budget.batch,), generator=gen)].to(device)
        fake = G(G.latent(len(y), gen), y) * 2 - 1
        noise = torch.randn(fake.shape, generator=gen).to(device)
        sanitized = SanitizedGradient.apply(fake, budget.clip, budget.sigma, noise)
        # summed, so that each generated image's gradient is O(1) against the clip bound C
        g_loss = -critics[k](sanitized, y).sum()
        g_opt.zero_grad()
        g_loss.backward()
        for p in critics[k].parameters():  # the critic is not updated by the generator's step
            p.grad = None
        g_opt.step()
        losses["generator"] = float(g_loss.detach())
    return losses
