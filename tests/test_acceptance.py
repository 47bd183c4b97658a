"""Full-size acceptance measurements (slow: run with ``pytest -m slow``). The default run has reduced
versions of the same assertions in test_attacks.py."""

import pytest
import torch

from leakshield.attacks import create_attack
from leakshield.fl import server_view_of
from leakshield.metrics import psnr, ssim
from leakshield.models import create_model

pytestmark = pytest.mark.slow


def _victims(digits3, count=8):
    order = torch.randperm(len(digits3.train), generator=torch.Generator().manual_seed(0))[:count]
    return [digits3.train.subset([int(i)]) for i in order]


def _attack(digits3, attack, labels_known: bool) -> list[tuple[float, float]]:
    model = create_model("lenet", in_shape=digits3.info.shape, num_classes=10)
    results = []
    for k, data in enumerate(_victims(digits3)):
        view = server_view_of(model, data, digits3.info, labels_known=labels_known)
        rec = attack.reconstruct(view, seed=k)
        results.append((float(psnr(rec.images, data.x)), float(ssim(rec.images, data.x))))
    return results


def test_idlg_eight_victims_no_restarts(digits3):
    results = _attack(digits3, create_attack("idlg"), labels_known=False)
    print("iDLG (PSNR, SSIM) per victim:", [(round(p, 1), round(s, 3)) for p, s in results])
    assert sum(p >= 30 and s >= 0.9 for p, s in results) >= 6
