"""Inverting Gradients' step schedule, shared by the attacks and by DCS²'s concealed-sample synthesis
(which optimizes the same way an attack does)."""

from __future__ import annotations

import torch


def ig_milestones(iterations: int) -> list[int]:
    """Inverting Gradients' MultiStepLR milestones (γ = 0.1) scaled to the budget: ⌊3N/8⌋, ⌊5N/8⌋,
    ⌊7N/8⌋ in exact arithmetic (the reference's float division gives 1799, 2999, 4203 at N = 4800;
    leakshield gives 1800, 3000, 4200)."""
    return [iterations * 3 // 8, iterations * 5 // 8, iterations * 7 // 8]


def ig_step_schedule(
    optimizer: torch.optim.Optimizer, iterations: int
) -> torch.optim.lr_scheduler.MultiStepLR:
    """The lr divided by 10 at each of :func:`ig_milestones` for a run of ``iterations`` steps."""
    return torch.optim.lr_scheduler.MultiStepLR(optimizer, ig_milestones(iterations), gamma=0.1)
