"""Generative-prior attacks, by a server holding a generator fitted on the public split: GGL (Li et al.,
CVPR 2022), its adaptive variant and GIAS's generator tuning (Jeon et al., NeurIPS 2021). Importing
registers ``ggl`` (aliases ``ggl-cma``, ``gias``) and ``ggl-adaptive``."""

from leakshield.attacks.prior.generator import GeneratorPriorParams, fitted_generator
from leakshield.attacks.prior.ggl import AdaptiveGGL, GenerativeGradientLeakage, GGLParams
from leakshield.old_import_paths import ggl_getattr as __getattr__  # noqa: F401  (0.2's ggl.attack, ggl.prior)

__all__ = [
    "AdaptiveGGL",
    "GGLParams",
    "GenerativeGradientLeakage",
    "GeneratorPriorParams",
    "fitted_generator",
]
