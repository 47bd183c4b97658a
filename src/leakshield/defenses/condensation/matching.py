"""Synthetic sets learned by matching: gradients (DC, Zhao et al., ICLR 2021, Algorithm 1; with
differentiable siamese augmentation, DSA, Zhao & Bilen, ICML 2021) or feature distributions (DM, Zhao &
Bilen, WACV 2023, Eq. 4).

Synthetic images live in [0, 1] pixel space (clamped after each update, so they are valid training
images for the client; the papers leave them unbounded in normalized space) and are updated by SGD with
momentum 0.5 (both papers), the momentum buffer kept with them so a run resumes exactly. Every random
draw (network initialization, real minibatches, augmentation) is seeded by (seed, iteration, …).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from leakshield.data.types import DatasetInfo, ImageSet
from leakshield.defenses.condensation.augment import siamese_augment
from leakshield.defenses.condensation.synthetic import CondensationNet, class_indices, sample


def _seed(*parts: int) -> int:
    value = 0
    for part in parts:
        value = (value * 1_000_003 + part) % (2**62)
    return value


def layer_distance(synthetic: list[torch.Tensor], real: list[torch.Tensor]) -> torch.Tensor:
    """DC's matching distance (Eq. 10): per layer, Σ over output units of 1 − cos between the rows of the
    weight gradients (a conv kernel flattened per output channel); 1-D parameters (biases, norms) are
    not matched, as in the reference."""
    total = synthetic[0].new_zeros(())
    for gs, gr in zip(synthetic, real, strict=True):
        if gs.dim() == 1:
            continue
        gs, gr = gs.flatten(1), gr.flatten(1)
        total = total + (1 - F.cosine_similarity(gs, gr, dim=1, eps=1e-6)).sum()
    return total


@dataclass
class SyntheticSet:
    """The images being learned, their fixed labels and SGD's momentum buffer."""

    x: torch.Tensor
    y: torch.Tensor
    momentum: torch.Tensor

    @classmethod
    def start(cls, images: ImageSet) -> SyntheticSet:
        return cls(images.x.clone(), images.y.clone(), torch.zeros_like(images.x))

    def state(self) -> dict[str, torch.Tensor]:
        return {"x": self.x, "momentum": self.momentum}

    def step(self, grad: torch.Tensor, lr: float, momentum: float = 0.5) -> None:
        with torch.no_grad():
            self.momentum.mul_(momentum).add_(grad)
            self.x.sub_(lr * self.momentum).clamp_(0.0, 1.0)


@dataclass(frozen=True)
class MatchingSetup:
    """width/depth: the ConvNet; batch_real: real images per class per step; augment: DSA on."""

    info: DatasetInfo
    width: int
    depth: int
    batch_real: int
    augment: bool
    seed: int

    def network(self, iteration: int, device: torch.device) -> nn.Module:
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(_seed(self.seed, iteration))
            return CondensationNet(self.info, self.width, self.depth).to(device)

    def view(self, x: torch.Tensor, *seed: int) -> torch.Tensor:
        x = self.info.normalize(x)
        return siamese_augment(x, _seed(self.seed, *seed)) if self.augment else x


def gradient_matching_iteration(
    setup: MatchingSetup, real: ImageSet, syn: SyntheticSet, iteration: int, *,
    outer: int, inner: int, lr_images: float, lr_net: float, batch_train: int,
) -> float:  # fmt: skip
    """One outer iteration of DC/DSA: a fresh network; ``outer`` times: match per class the gradient of
    the synthetic images' loss to the real images', step the images; between them, ``inner`` SGD steps
    of the network on the synthetic set. Returns the mean matching loss."""
    device = syn.x.device
    net = setup.network(iteration, device)
    params = list(net.parameters())
    net_opt = torch.optim.SGD(params, lr=lr_net)
    real_idx, syn_idx = class_indices(real.y), class_indices(syn.y)
    total = 0.0
    for ol in range(outer):
        gen = torch.Generator().manual_seed(_seed(setup.seed, iteration, ol))
        x = syn.x.detach().requires_grad_(True)
        loss = x.new_zeros(())
        for c, idx in syn_idx.items():
            pick = sample(real_idx[c], setup.batch_real, gen)
            xr, yr = setup.view(real.x[pick], iteration, ol, c), real.y[pick]
            g_real = torch.autograd.grad(F.cross_entropy(net(xr), yr), params)
            xs = setup.view(x[idx], iteration, ol, c)
            g_syn = torch.autograd.grad(F.cross_entropy(net(xs), syn.y[idx]), params, create_graph=True)
            loss = loss + layer_distance(list(g_syn), [g.detach() for g in g_real])
        (image_grad,) = torch.autograd.grad(loss, x)
        syn.step(image_grad, lr_images)
        total += float(loss.detach()) / max(1, len(syn_idx))
        if ol == outer - 1:
            break
        for il in range(inner):
            pick = sample(torch.arange(len(syn.x), device=device), batch_train, gen)
            xs = setup.view(syn.x[pick].detach(), iteration, ol, il, 7)
            net_opt.zero_grad()
            F.cross_entropy(net(xs), syn.y[pick]).backward()
            net_opt.step()
    return total / outer


def distribution_matching_iteration(
    setup: MatchingSetup, real: ImageSet, syn: SyntheticSet, iteration: int, *, lr_images: float
) -> float:
    """One iteration of DM (Eq. 4): a fresh random network; per class, the squared distance between the
    mean embeddings of a real batch and of the synthetic images, both augmented with the same DSA draw;
    one SGD step on the images. Vectorized over classes: one forward pass for all real batches and one
    for all synthetic images, class means by a one-hot matrix product. Returns the loss summed over
    classes."""
    net = setup.network(iteration, syn.x.device)
    for p in net.parameters():
        p.requires_grad_(False)
    gen = torch.Generator().manual_seed(_seed(setup.seed, iteration))
    real_idx, syn_idx = class_indices(real.y), class_indices(syn.y)
    picks = torch.cat([sample(real_idx[c], setup.batch_real, gen) for c in syn_idx])
    x = syn.x.detach().requires_grad_(True)
    mean_real = _class_means(net.embed(setup.view(real.x[picks], iteration)), real.y[picks], syn_idx)
    mean_syn = _class_means(net.embed(setup.view(x, iteration)), syn.y, syn_idx)
    loss = ((mean_real - mean_syn) ** 2).sum()
    (image_grad,) = torch.autograd.grad(loss, x)
    syn.step(image_grad, lr_images)
    return float(loss.detach())


def _class_means(features: torch.Tensor, y: torch.Tensor, classes: dict[int, torch.Tensor]) -> torch.Tensor:
    """(classes × features) mean feature of each class in ``classes``' order."""
    order = torch.tensor(list(classes), device=y.device)
    onehot = (y.view(1, -1) == order.view(-1, 1)).to(features.dtype)
    return (onehot @ features) / onehot.sum(1, keepdim=True)


#: fixed random networks on which a synthetic set's matching objective is probed (its convergence)
PROBE_NETWORKS = 4


def probe_networks(setup: MatchingSetup, device: torch.device) -> list[nn.Module]:
    """:data:`PROBE_NETWORKS` fixed initializations, seeded apart from every iteration's network."""
    return [setup.network(-1 - k, device) for k in range(PROBE_NETWORKS)]


def distribution_probe(setup: MatchingSetup, real: ImageSet, syn: SyntheticSet) -> float:
    """DM's objective (Eq. 4) on the probe networks, all of the client's real images, no augmentation:
    the squared distance of the class means' embeddings, summed over classes, averaged over networks."""
    classes = class_indices(syn.y)
    total = 0.0
    with torch.no_grad():
        for net in probe_networks(setup, syn.x.device):
            mean_real = _class_means(net.embed(setup.info.normalize(real.x)), real.y, classes)
            mean_syn = _class_means(net.embed(setup.info.normalize(syn.x)), syn.y, classes)
            total += float(((mean_real - mean_syn) ** 2).sum())
    return total / PROBE_NETWORKS


def gradient_probe(setup: MatchingSetup, real: ImageSet, syn: SyntheticSet) -> float:
    """DC's objective (Eq. 10) on the probe networks, all of the client's real images of each class, no
    augmentation: the layer distance of the synthetic and real gradients, averaged over classes and
    networks."""
    real_idx, syn_idx = class_indices(real.y), class_indices(syn.y)
    total = 0.0
    for net in probe_networks(setup, syn.x.device):
        params = list(net.parameters())
        for c, idx in syn_idx.items():
            rows, norm = real_idx[c], setup.info.normalize
            g_real = torch.autograd.grad(F.cross_entropy(net(norm(real.x[rows])), real.y[rows]), params)
            g_syn = torch.autograd.grad(F.cross_entropy(net(norm(syn.x[idx])), syn.y[idx]), params)
            total += float(layer_distance(list(g_syn), list(g_real))) / len(syn_idx)
    return total / PROBE_NETWORKS
