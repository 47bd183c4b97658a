"""The client's own samples a data-reading guard judges a received model on: up to ``samples`` of its
dataset, drawn with the round's generator (the same draw for every guard of the round), normalized and
on the model's device."""

from __future__ import annotations

import torch
from torch import nn

from leakshield.defenses.base import ClientContext


def probe_batch(model: nn.Module, context: ClientContext, samples: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(normalized inputs, labels) of up to ``samples`` of the client's data."""
    data = context.dataset
    device = next(model.parameters()).device
    if len(data) > samples:
        state = context.generator.get_state()  # leave the round's stream as training will find it
        order = torch.randperm(len(data), generator=context.generator, device=context.generator.device)
        context.generator.set_state(state)
        data = data.subset(order[:samples].cpu().tolist())
    x = context.info.normalize(data.x.to(device))
    return x, data.y.to(device)
