"""Anti-GAN (Luo & Zhang, TKDD 2025): the window-variance obfuscation loss, the revised mixup and the
defense whose client fit trains the defender's CGAN."""

from leakshield.defenses.antigan import defense  # noqa: F401  (registers the defense)
from leakshield.defenses.antigan.obfuscation import revised_mixup, window_variance_loss

__all__ = ["revised_mixup", "window_variance_loss"]
