"""Named presets of the gradient-inversion engine with their papers' settings.

Each preset is the engine with other parameter defaults; every parameter can still be overridden from a
config (``{name: ig, iterations: 1000}``). ``leakshield list attacks -v`` prints each preset's values.
"""

from __future__ import annotations

import copy
from typing import Any

import pydantic

from leakshield.attacks.base import ATTACKS
from leakshield.attacks.passive.inversion.engine import GradientInversion, GradientInversionParams
from leakshield.threats import OBSERVER, Adversary, Knowledge, threat

IG_LIKE = {
    "optimizer": "adam",
    "lr": 0.1,
    "signed": True,
    "boxed": True,
    "tv": 1e-4,
    "lr_schedule": "milestones",
    "tolerance": 0.0,
}
#: presets whose priors use more than the update: GradInversion's BatchNorm statistics (Carletti's E)
GRADIENT_MATCHING_THREATS = {
    "gradinversion": threat(Adversary.OBSERVING_SERVER, (Knowledge.PROTOCOL, Knowledge.BATCHNORM)),
}
ATS_LBFGS = {"optimizer": "lbfgs", "iterations": 300, "restarts": 16}

#: name → (summary, reference, defaults)
PRESETS: dict[str, tuple[str, str, dict[str, Any]]] = {
    "gradient-inversion": (
        "the gradient-matching engine with every part configurable (defaults: L2 + L-BFGS)",
        "Zhu et al., NeurIPS 2019; Zhao et al., 2020; Geiping et al., NeurIPS 2020",
        {},
    ),
    "dlg": (
        "DLG: L2 + L-BFGS (lr 1, 300 steps), images and soft labels optimized jointly",
        "Zhu et al., Deep Leakage from Gradients, NeurIPS 2019",
        {"distance": "l2", "optimizer": "lbfgs", "lr": 1.0, "iterations": 300, "labels": "joint"},
    ),
    "idlg": (
        "iDLG: L2 + L-BFGS (lr 1, 300 steps), label inferred from the last layer, stop at 1e-6",
        "Zhao et al., iDLG: Improved Deep Leakage from Gradients, arXiv:2001.02610",
        {"distance": "l2", "optimizer": "lbfgs", "lr": 1.0, "iterations": 300, "labels": "infer"},
    ),
    "ig": (
        "Inverting Gradients as run for its paper: cosine + TV 1e-4, signed Adam lr 0.1, boxed, "
        "24,000 steps with the milestone schedule scaled to the budget",
        "Geiping et al., Inverting Gradients, NeurIPS 2020",
        {"distance": "cosine", "iterations": 24_000, **IG_LIKE},
    ),
    "iga-precode": (
        "IGA as PRECODE ran it: cosine + TV 1e-6, unsigned Adam lr 0.01, boxed, milestone decay, "
        "Gaussian start, up to 7,000 steps, stopped after 1,200 without a lower loss",
        "Scheliga et al., PRECODE, WACV 2022, Sec. 4 (Geiping et al.'s IG implementation)",
        {
            "distance": "cosine",
            **IG_LIKE,
            "lr": 0.01,
            "signed": False,
            "tv": 1e-6,
            "iterations": 7000,
            "patience": 1200,
            "init": "randn",
        },
    ),
    "cpl": (
        "CPL: L2 + task-loss term (weight 1), patterned init, L-BFGS 300 steps, label inferred",
        "Wei et al., A Framework for Evaluating Gradient Leakage Attacks in FL, ESORICS 2020",
        {
            "distance": "l2",
            "optimizer": "lbfgs",
            "lr": 1.0,
            "iterations": 300,
            "init": "patterned",
            "task_loss": 1.0,
            "labels": "infer",
        },
    ),
    "gradinversion": (
        "GradInversion: L2 + TV + image norm + BatchNorm statistics, unsigned Adam lr 0.1, boxed, "
        "20,000 steps, cosine decay after 50 warm-up steps (breaching's seethroughgradients)",
        "Yin et al., See through Gradients, CVPR 2021; breaching's seethroughgradients config "
        "(objective scale 1e-4, TV 1e-4, norm 1e-6, BN 0.1 → relative weights 1, 1e-2, 1e3 here)",
        {
            "distance": "l2",
            "optimizer": "adam",
            "lr": 0.1,
            "iterations": 20_000,
            "boxed": True,
            "lr_schedule": "cosine",
            "warmup": 50,
            "tv": 1.0,
            "image_norm": 1e-2,
            "bn_stats": 1e3,
            "labels": "infer",
            "tolerance": 0.0,
        },
    ),
    "lbfgs-l2": (
        "ATS variant LBFGS+L2 (DLG's matching): 16 restarts × 300 L-BFGS steps, best kept",
        "Gao et al., ATS, CVPR 2021, Sec. 5 (the released code's 'zhu' setting differs: lr 1e-4, TV 1e-3)",
        {"distance": "l2", "lr": 1.0, **ATS_LBFGS},
    ),
    "adam-cosine": (
        "ATS variant Adam+Cosine (IG): signed Adam lr 0.1, boxed, TV 1e-4, 4800 steps, milestones",
        "Gao et al., ATS, CVPR 2021 (released config 'inversed')",
        {"distance": "cosine", "iterations": 4800, **IG_LIKE},
    ),
    "lbfgs-cosine": (
        "ATS variant LBFGS+Cosine: lr 1e-4, TV 1e-4, boxed, 16 restarts × 300 steps",
        "Gao et al., ATS, CVPR 2021 (released config 'inversed-LBFGS-sim')",
        {"distance": "cosine", "lr": 1e-4, "tv": 1e-4, "boxed": True, **ATS_LBFGS},
    ),
    "adam-l1": (
        "ATS variant Adam+L1: signed Adam lr 0.1, boxed, TV 1e-4, 4800 steps, milestones",
        "Gao et al., ATS, CVPR 2021 (released config 'inversed-adam-L1')",
        {"distance": "l1", "iterations": 4800, **IG_LIKE},
    ),
    "adam-l2": (
        "ATS variant Adam+L2 (GradInversion-style): signed Adam lr 0.1, boxed, TV 1e-4, 4800 steps",
        "Gao et al., ATS, CVPR 2021 (released config 'inversed-adam-L2')",
        {"distance": "l2", "iterations": 4800, **IG_LIKE},
    ),
    "sgd-cosine": (
        "ATS variant SGD+Cosine: signed SGD lr 0.1, boxed, TV 1e-4, 4800 steps, milestones",
        "Gao et al., ATS, CVPR 2021 (released config 'inversed-sgd-sim')",
        {"distance": "cosine", "iterations": 4800, **IG_LIKE, "optimizer": "sgd"},
    ),
}


def preset_params(name: str, defaults: dict[str, Any]) -> type[GradientInversionParams]:
    """A subclass of :class:`GradientInversionParams` whose fields default to ``defaults``."""
    fields: dict[str, Any] = {}
    for field, value in defaults.items():
        info = copy.copy(GradientInversionParams.model_fields[field])
        info.default = value
        fields[field] = (GradientInversionParams.model_fields[field].annotation, info)
    class_name = "".join(part.capitalize() for part in name.replace("-", " ").split()) + "Params"
    cls = pydantic.create_model(class_name, __base__=GradientInversionParams, **fields)
    globals()[class_name] = cls  # importable by name, so an attack pickles (victim-shard workers)
    return cls


for _name, (_summary, _reference, _defaults) in PRESETS.items():
    ATTACKS.register(
        _name,
        summary=_summary,
        reference=_reference,
        params=preset_params(_name, _defaults),
        threat=GRADIENT_MATCHING_THREATS.get(_name, OBSERVER),
    )(GradientInversion)
