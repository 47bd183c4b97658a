"""Generative-prior gradient inversion: GGL (Li et al., CVPR 2022), its adaptive variant and GIAS's
generator tuning (Jeon et al., NeurIPS 2021). Importing registers ``ggl`` (aliases ``ggl-cma``,
``gias``) and ``ggl-adaptive``."""

from leakshield.attacks.ggl.attack import AdaptiveGGL, GenerativeGradientLeakage, GGLParams
from leakshield.attacks.ggl.prior import GeneratorPriorParams, fitted_generator

__all__ = [
    "AdaptiveGGL",
    "GGLParams",
    "GenerativeGradientLeakage",
    "GeneratorPriorParams",
    "fitted_generator",
]
