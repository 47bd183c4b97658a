"""SPEAR at batch 16 on real CIFAR-10 images with a larger subset budget (2^21): the batch that the
default budget leaves one direction short (docs/components/exact-attacks.md, "Measured") is recovered
exactly. 35 s on one thread and 62 s on two, measured on 2 busy cores: in the default suite, since the
issue asks for this regime to be shown on CPU in minutes."""

import torch

from leakshield.attacks import create_attack
from leakshield.data import ImageSet
from leakshield.data.types import DatasetInfo
from leakshield.fl import server_view_of
from leakshield.metrics import match_reconstructions
from leakshield.models import create_model

CIFAR = DatasetInfo("cifar10", (3, 32, 32), 10, (0.4915, 0.4823, 0.4468), (0.2470, 0.2435, 0.2616))
DEFAULT_BUDGET = 262_144


def test_spear_recovers_all_16_images_exactly_with_2_to_the_21_subsets(cifar_victims):
    """benchmarks/exact_attacks.py's second CIFAR-10 batch of 16 (model seed 1, victims 16–31, attack
    seed 1). Measured: at the default budget 15 directions, 1 of 16 images exact (PSNR 11.3–33.9 dB for
    the others, λ 0.916); with 2^21 subsets all 16 directions after 311,296 subsets, per-image MSE
    ≤ 2.8e-14 (PSNR ≥ 135.5 dB), λ 0.99994 (one entry of 16,384 off). The bound, PSNR ≥ 100 dB, sits
    between: a blend or a missing direction costs tens of dB."""
    images, labels = cifar_victims
    data = ImageSet(images[16:32], labels[16:32])
    model = create_model("mlp", {"width": 1024}, in_shape=CIFAR.shape, num_classes=10, seed=1)
    attack = create_attack("spear", {"samples": 2**21})
    rec = attack.reconstruct(server_view_of(model, data, CIFAR, labels_known=True), seed=1)
    assert rec.stats["directions"] == 16
    assert DEFAULT_BUDGET < rec.stats["subsets"] <= 2**21  # beyond the default budget (measured 311,296)
    assert rec.stats["relu_agreement"] >= 0.999
    matched = rec.images[match_reconstructions(rec.images, data.x)]
    mse = ((matched - data.x) ** 2).flatten(1).mean(dim=1)
    psnr = 10 * torch.log10(1 / mse.clamp_min(1e-30))
    assert float(psnr.min()) >= 100.0, psnr.tolist()
