"""The GAN attack of Hitaj et al. (*Deep Models Under the GAN: Information Leakage from Collaborative
Deep Learning*, CCS 2017), as Anti-GAN evaluates it (Luo & Zhang, TKDD 2025, Sec. 3 and appendix
Table 6): a *participant* of the federation — a malicious client, not the server — learns what the
images of a class it does not own look like.

Every round the attacker (1) takes the global model it received as its discriminator D, with one extra
"fake" output (Table 6: 10 → 11 outputs) whose weights it keeps between rounds and trains on its own real
images against its generator's samples; (2) trains its conditional generator G so that D assigns G(z|a)
to the victim class a (and not to "fake"); (3) active variant: trains its reply on its own data plus
``inject`` samples of G labelled with a wrong class c it owns (``inject_label``), so that the victim's
next updates must separate a from c and reveal more about a (the model Anti-GAN's experiments attack
with, Sec. 3 and Table 1). The passive variant replies honestly on its own data and only trains G against
the models it receives. The attacker controls its own copy of the model, so a dropout defense's layers
are switched off in D (``dropout_off``; they would only add noise to its own discriminator). After the
last round G trains ``final_steps`` more against the final global model (``finish``), and the attacker
releases labelled samples of G (``release``) that the evaluator, never the attack, scores. What the
attacker sees is only what a participant receives: its own data, the models sent to it.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import ClassVar, Literal

import pydantic
import torch
from torch import nn
from torch.nn import functional as F

from leakshield.attacks.base import ATTACKS, Attack, Participation, Reconstruction
from leakshield.data.types import DatasetInfo, ImageSet
from leakshield.defenses.base import DefensePipeline
from leakshield.errors import ConfigError, LeakshieldError
from leakshield.fl.client import HonestClient
from leakshield.fl.config import LocalTraining
from leakshield.fl.types import ClientUpdate, ServerView
from leakshield.generative import ConditionalGenerator
from leakshield.generative.training import freeze
from leakshield.registry import Params
from leakshield.threats import Adversary, Knowledge, Rounds, threat


class HitajParams(Params):
    """mode: ``active`` (inject mislabelled samples) or ``passive``. attacker: the attacker's client index
    (default the last client). targets: the victim classes (default every class the attacker holds none
    of). inject_label: the wrong label of injected samples (default the attacker's smallest class). rounds:
    rounds the attacker takes part in, after the grid's attack round of honest training. generator_steps:
    generator updates per round. final_steps: generator updates after the last round. batch_size: the
    generator's batch. lr: its Adam step (1e-4 as in the paper). head_steps: updates of the fake output per
    round. head_lr: their Adam step. inject: samples injected per round. width: the generator's (Table 4:
    64). victim_updates: false gives the control, a federation in which the victims' replies never reach
    the server. samples: generated images scored by class-level SSIM (the paper: 10,000). window: its SSIM
    window (8). dropout_off: switch off a dropout defense's always-on layers in the attacker's
    discriminator, as a participant controlling its own copy of the model would."""

    mode: Literal["active", "passive"] = "active"
    attacker: int | None = pydantic.Field(default=None, ge=0)
    targets: list[int] | None = None
    inject_label: int | None = pydantic.Field(default=None, ge=0)
    rounds: int = pydantic.Field(default=30, ge=1)
    generator_steps: int = pydantic.Field(default=20, ge=1)
    final_steps: int = pydantic.Field(default=300, ge=0)
    head_steps: int = pydantic.Field(default=5, ge=0)
    batch_size: int = pydantic.Field(default=64, ge=1)
    lr: float = pydantic.Field(default=1e-4, gt=0)
    head_lr: float = pydantic.Field(default=1e-3, gt=0)
    inject: int = pydantic.Field(default=64, ge=0)
    width: int = pydantic.Field(default=64, ge=4)
    victim_updates: bool = True
    samples: int = pydantic.Field(default=1000, ge=1)
    window: int = pydantic.Field(default=8, ge=2)
    dropout_off: bool = True

    def check_data(self, shape: tuple[int, int, int], num_classes: int) -> None:
        outside = sorted({t for t in self.targets or () if not 0 <= t < num_classes})
        if outside:
            raise ValueError(f"targets: {outside} outside the classes 0..{num_classes - 1}")
        if self.inject_label is not None and self.inject_label >= num_classes:
            raise ValueError(f"inject_label: {self.inject_label} outside the classes 0..{num_classes - 1}")
        if self.window > min(shape[1:]):
            raise ValueError(f"window: {self.window} is larger than the {shape[1]}×{shape[2]} images")


class FakeClassHead(nn.Module):
    """The classifier's last linear layer with one more output, "fake" (its weights the attacker's)."""

    def __init__(self, linear: nn.Linear, weight: torch.Tensor, bias: torch.Tensor) -> None:
        super().__init__()
        self.linear = linear
        self.weight = nn.Parameter(weight)
        self.bias = nn.Parameter(bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.cat([self.linear(x), F.linear(x, self.weight, self.bias)], dim=1)


def with_fake_class(
    model: nn.Module, num_classes: int, weight: torch.Tensor, bias: torch.Tensor
) -> nn.Module:
    """A copy of ``model`` whose last ``num_classes``-output linear layer gains the fake output."""
    D = copy.deepcopy(model)
    names = [n for n, m in D.named_modules() if isinstance(m, nn.Linear) and m.out_features == num_classes]
    if not names:
        raise ConfigError(f"hitaj: the model has no linear layer with {num_classes} outputs to extend")
    parent_name, _, child = names[-1].rpartition(".")
    parent = D.get_submodule(parent_name) if parent_name else D
    linear = getattr(parent, child)
    setattr(parent, child, FakeClassHead(linear, weight.to(linear.weight), bias.to(linear.weight)))
    return D


@dataclass
class HitajAttacker:
    """The attacker as a :class:`~leakshield.fl.participants.Participant`: its own ``dataset``, the
    local protocol, the dataset's public facts; its generator and fake output live here between rounds."""

    client_id: int
    dataset: ImageSet
    local: LocalTraining
    info: DatasetInfo
    params: HitajParams
    targets: list[int]
    inject_label: int
    seed: int = 0
    accounted: ClassVar[bool] = False
    generator: ConditionalGenerator = field(init=False)
    #: rounds before this one it takes part honestly (no generator, no injection)
    active_from: int = field(default=0, init=False)

    def __post_init__(self) -> None:
        channels, size, _ = self.info.shape
        device = self.dataset.x.device
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(self.seed)
            self.generator = ConditionalGenerator(
                channels, size, self.info.num_classes, width=self.params.width
            )
        self.generator.to(device)
        self.g_opt = torch.optim.Adam(self.generator.parameters(), lr=self.params.lr, betas=(0.5, 0.999))
        self.fake_weight: torch.Tensor | None = None  # sized on the first model received
        self.fake_bias = torch.zeros(1, device=device)
        self.rng = torch.Generator().manual_seed(self.seed * 7919 + 1)

    def fit(self, model: nn.Module, round: int) -> ClientUpdate | None:
        data = self.dataset
        if round >= self.active_from:
            self.train_generator(model, self.params.generator_steps)
        if round >= self.active_from and self.params.mode == "active" and self.params.inject:
            fakes = self.sample(self.params.inject)
            injected = torch.full((len(fakes),), self.inject_label, dtype=torch.long, device=data.y.device)
            data = ImageSet(torch.cat([data.x, fakes]), torch.cat([data.y, injected]))
        client = HonestClient(self.client_id, data, self.local, DefensePipeline(), self.info, seed=self.seed)
        return client.fit(model, round)

    def discriminator(self, model: nn.Module) -> nn.Module:
        """D: the received model with the fake output, frozen except that output; eval mode."""
        if self.fake_weight is None:
            linears = [m for m in model.modules() if isinstance(m, nn.Linear)
                       and m.out_features == self.info.num_classes]  # fmt: skip
            if not linears:
                raise ConfigError(f"hitaj: no linear layer with {self.info.num_classes} outputs")
            self.fake_weight = torch.zeros(1, linears[-1].in_features, device=self.fake_bias.device)
        D = freeze(with_fake_class(model, self.info.num_classes, self.fake_weight, self.fake_bias)).eval()
        if self.params.dropout_off:
            for module in D.modules():
                if hasattr(module, "inference"):  # a dropout defense's always-on layer
                    module.inference = True
        head = next(m for m in D.modules() if isinstance(m, FakeClassHead))
        head.weight.requires_grad_(True)
        head.bias.requires_grad_(True)
        return D

    def train_generator(self, model: nn.Module, steps: int) -> None:
        """The fake output's updates, then ``steps`` generator updates against D = ``model`` + fake."""
        p, norm, G = self.params, self.info.normalize, self.generator
        D = self.discriminator(model)
        head = next(m for m in D.modules() if isinstance(m, FakeClassHead))
        head_opt = torch.optim.Adam([head.weight, head.bias], lr=p.head_lr)
        fake_class = self.info.num_classes
        half = max(1, p.batch_size // 2)
        for _ in range(p.head_steps):
            real = torch.randint(len(self.dataset), (half,), generator=self.rng).to(self.dataset.x.device)
            fakes = self.sample(half, train_mode=True).detach()
            x = torch.cat([self.dataset.x[real], fakes])
            y = torch.cat([self.dataset.y[real], torch.full((half,), fake_class, device=fakes.device)])
            loss = F.cross_entropy(D(norm(x)), y)
            head_opt.zero_grad(set_to_none=True)
            loss.backward()
            head_opt.step()
        self.fake_weight, self.fake_bias = head.weight.detach().clone(), head.bias.detach().clone()
        head.weight.requires_grad_(False)
        head.bias.requires_grad_(False)
        G.train()
        for _ in range(steps):
            y = self._targets(p.batch_size)
            z = torch.randn(p.batch_size, G.latent_dim, generator=self.rng).to(y.device)
            loss = F.cross_entropy(D(norm(G(z, y))), y)
            self.g_opt.zero_grad(set_to_none=True)
            loss.backward()
            self.g_opt.step()

    def _targets(self, n: int) -> torch.Tensor:
        pick = torch.randint(len(self.targets), (n,), generator=self.rng)
        return torch.tensor(self.targets, device=self.dataset.x.device)[pick]

    def finish(self, model: nn.Module) -> None:
        """After the last round: ``final_steps`` generator updates against the final global model."""
        self.train_generator(model, self.params.final_steps)

    def release(self, count: int, seed: int) -> ImageSet:
        """The attacker's output: ``count`` generated images spread evenly over its target classes, with
        their labels, drawn from a stream seeded by ``seed``."""
        self.rng = torch.Generator().manual_seed(seed)
        targets = torch.tensor(self.targets, device=self.dataset.x.device)
        labels = targets.repeat_interleave(-(-count // len(targets)))[:count]
        images = torch.cat([self.sample(len(chunk), labels=chunk) for chunk in labels.split(500)])
        return ImageSet(images.detach(), labels)

    def sample(self, n: int, *, train_mode: bool = False, labels: torch.Tensor | None = None) -> torch.Tensor:
        """n generated images of the victim classes (or of ``labels``)."""
        G = self.generator
        G.train(train_mode)
        y = labels if labels is not None else self._targets(n)
        z = torch.randn(len(y), G.latent_dim, generator=self.rng).to(y.device)
        with torch.set_grad_enabled(train_mode):
            out = G(z, y)
        G.train()
        return out


@ATTACKS.register(
    "hitaj",
    summary="GAN attack by a malicious client: the global model (+ a fake class) is its discriminator, its "
    "CGAN learns a class it does not own, mislabelled samples make the victim reveal more [active]",
    reference="Hitaj et al., Deep Models Under the GAN, CCS 2017; as evaluated by Anti-GAN (Luo & Zhang, "
    "TKDD 2025, Sec. 3, Table 6)",
    params=HitajParams,
    threat=threat(
        Adversary.PARTICIPANT, (Knowledge.PROTOCOL,), rounds=Rounds.TRAINING, secure_aggregation=True
    ),
    aliases={"hitaj-passive": {"mode": "passive"}, "hitaj-control": {"victim_updates": False}},
)
class HitajGAN(Attack):
    """A participant attack: the grid runs it inside FL training (the participant-attack cell protocol)
    and the evaluator scores the samples it releases by class-level SSIM; it has no server view."""

    params: HitajParams
    #: the dry run's probe: each of its rounds trains the federation and the generator, and its final
    #: generator steps run once per cell
    probe_budget = "rounds"
    setup_budget = "final_steps"

    def participation(self) -> Participation:
        p = self.params
        return Participation(p.attacker, p.rounds, p.samples, victims_heard=p.victim_updates, window=p.window)

    def reconstruct(self, view: ServerView, *, seed: int = 0) -> Reconstruction:
        raise LeakshieldError("hitaj is a participant attack: it runs inside FL training in a grid, "
                              "not on a server view")  # fmt: skip

    def participant(
        self, client_id: int, dataset: ImageSet, local: LocalTraining, info: DatasetInfo, seed: int
    ) -> HitajAttacker:
        """The attacker client holding ``dataset``; its targets default to the classes it lacks."""
        owned = sorted(set(dataset.y.tolist()))
        targets = self.params.targets or [c for c in range(info.num_classes) if c not in owned]
        if not targets:
            raise ConfigError("hitaj: the attacker holds every class; give it a by-class partition "
                              "(fl.partition kind by-class) or set targets")  # fmt: skip
        bad = [c for c in targets if not 0 <= c < info.num_classes]
        if bad:
            raise ConfigError(f"hitaj.targets: {bad} are not classes 0..{info.num_classes - 1}")
        if self.params.inject_label is not None:
            inject = self.params.inject_label
        elif owned:
            inject = owned[0]
        else:
            raise ConfigError("hitaj: the attacker holds no data (check fl.partition and attacker)")
        return HitajAttacker(client_id, dataset, local, info, self.params, targets, inject, seed)
