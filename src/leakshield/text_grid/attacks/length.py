"""The dummy sequences' length TAG and LAMP optimise: the one the update leaks."""

from __future__ import annotations

from leakshield.errors import LeakshieldError
from leakshield.text.dager_lora import leaked_lora_length
from leakshield.text.lora import AdapterClassifier
from leakshield.text.tag import leaked_length
from leakshield.text_grid.attacks.base import TextAttackInput


def dummy_length(given: TextAttackInput) -> int:
    """The dummy sequences' length: the one the position embedding's gradient leaks (under LoRA, where
    it is frozen: the positions DAGER's token check passes), or the longest the model takes when that is
    under 3 or no position shows a gradient above the noise."""
    if isinstance(given.model, AdapterClassifier):  # frozen position rows: the adapters' span tells it
        length = leaked_lora_length(given.model, given.gradient, noise_std=given.noise_std) or 0
        return length if length >= 3 else given.model.max_length
    try:
        length = leaked_length(given.model, given.gradient, given.noise_std)
    except LeakshieldError:  # no position row stands above the noise
        length = 0
    return length if length >= 3 else given.model.max_length
