"""LoRA adapters on the text classifiers (Hu et al., *LoRA: Low-Rank Adaptation of Large Language
Models*, ICLR 2022), injected with the ``peft`` package: each targeted weight W (d_out × d_in) is used as
W + (α/r)·B·A with A (r × d_in, Kaiming-uniform from the seed) and B (d_out × r, zero), so the adapted
model starts equal to the backbone; the backbone is frozen and only A, B (and the classifier head,
``train_head``) are trained and shared.

:class:`AdapterClassifier` is a :class:`~leakshield.text.models.TextClassifier` whose
:meth:`~AdapterClassifier.named_parameters` are the shared ones only, so the FL clients, the defenses
(noise, clipping, DP-SGD) and the attacks see exactly what a LoRA deployment sends: the frozen weights
are parameters of no update (their values stay in the model and its ``state_dict``).

Targets: ``attention`` (BERT's query, key and value; GPT-2's fused ``c_attn``) and ``attention+ffn``
(also the first feed-forward layer: BERT's ``intermediate.dense``, GPT-2's ``c_fc``), in every block.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Iterator
from typing import Any, Literal

import torch
from torch import nn

from leakshield.errors import LeakshieldError
from leakshield.text.extra import text_extra
from leakshield.text.models import TextClassifier

LoraTargets = Literal["attention", "attention+ffn"]

#: module-name patterns (relative to the backbone, matched in full) per model kind and target group
_PATTERNS = {
    ("bert", "attention"): r"encoder\.layer\.\d+\.attention\.self\.(query|key|value)",
    ("bert", "ffn"): r"encoder\.layer\.\d+\.intermediate\.dense",
    ("gpt2", "attention"): r"h\.\d+\.attn\.c_attn",
    ("gpt2", "ffn"): r"h\.\d+\.mlp\.c_fc",
}
#: the name peft gives the one adapter
ADAPTER = "default"


def target_pattern(kind: str, targets: LoraTargets) -> str:
    """The regular expression peft matches module names against (``re.fullmatch``)."""
    groups = ["attention"] + (["ffn"] if targets == "attention+ffn" else [])
    return "(" + "|".join(_PATTERNS[(kind, g)] for g in groups) + ")"


class AdapterClassifier(TextClassifier):
    """``base`` (its weights copied, then frozen) with rank-``rank`` adapters of scale ``alpha / rank``
    on ``targets``, drawn from ``seed`` (the global RNG is left as it was). ``train_head``: the
    classifier head (and BERT's pooler) is trained and shared too, as peft's ``modules_to_save`` would;
    false: only A and B.

    The filter lives in this module's :meth:`named_parameters`: a module that wraps this one (say an
    ``nn.Sequential``) walks its children's parameters itself and would see the frozen ones too; the
    frozen parameters have ``requires_grad`` false for such consumers."""

    def __init__(
        self,
        base: TextClassifier,
        *,
        rank: int,
        alpha: float | None = None,
        targets: LoraTargets = "attention",
        train_head: bool = True,
        seed: int = 0,
    ) -> None:
        if isinstance(base, AdapterClassifier):
            raise LeakshieldError("the model already carries LoRA adapters")
        if rank < 1:
            raise LeakshieldError(f"LoRA rank {rank}: expected 1 or more")
        nn.Module.__init__(self)
        self.kind, self.max_length = base.kind, base.max_length
        self.backbone = copy.deepcopy(base.backbone)
        self.head = copy.deepcopy(base.head)
        self.rank, self.targets, self.train_head = rank, targets, train_head
        self.alpha = float(rank if alpha is None else alpha)
        peft: Any = text_extra("peft")
        config = peft.LoraConfig(
            r=rank,
            lora_alpha=self.alpha,
            target_modules=target_pattern(self.kind, targets),
            lora_dropout=0.0,
            bias="none",
            fan_in_fan_out=self.kind == "gpt2",  # GPT-2's Conv1D stores W as inputs × outputs
        )
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            peft.inject_adapter_in_model(config, self.backbone, adapter_name=ADAPTER)
        every = dict(nn.Module.named_parameters(self))
        shared = {n for n in every if ".lora_" in n}
        if train_head:
            shared |= {n for n in every if n.startswith(("head.", "backbone.pooler."))}
        for name, parameter in every.items():
            parameter.requires_grad_(name in shared)
        self.shared = frozenset(shared)

    @property
    def scaling(self) -> float:
        """α / r, the factor of B·A in the adapted weight."""
        return self.alpha / self.rank

    def named_parameters(
        self, prefix: str = "", recurse: bool = True, remove_duplicate: bool = True
    ) -> Iterator[tuple[str, nn.Parameter]]:
        """The shared parameters only: the adapters (and the head with ``train_head``)."""
        cut = prefix + "." if prefix else ""
        for name, parameter in super().named_parameters(prefix, recurse, remove_duplicate):
            if name.removeprefix(cut) in self.shared:
                yield name, parameter

    def adapters(self, block: int, part: str) -> list[tuple[str, nn.Module]]:
        """The adapted modules of ``block`` in ``part`` (``attention`` or ``ffn``): (name in the model,
        module), in the model's order (BERT's query, key, value)."""
        pattern = re.compile(_PATTERNS[(self.kind, part)])
        found = []
        for name, module in self.backbone.named_modules():
            if hasattr(module, "lora_A") and pattern.fullmatch(name) and _block(name) == block:
                found.append(("backbone." + name, module))
        return found

    def count_shared(self) -> int:
        """How many numbers one update holds."""
        return sum(p.numel() for _, p in self.named_parameters())


def _block(name: str) -> int:
    parts = name.split(".")
    return int(next(p for p in parts if p.isdigit()))


def lora_names(module_name: str) -> tuple[str, str]:
    """The parameter names of an adapted module's A and B."""
    return f"{module_name}.lora_A.{ADAPTER}.weight", f"{module_name}.lora_B.{ADAPTER}.weight"
