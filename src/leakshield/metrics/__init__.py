"""Metrics: image similarity (MSE, PSNR, SSIM, LPIPS), privacy (ASR, matching), utility (accuracy, ADR)."""

from leakshield.metrics.image import mse, psnr, ssim
from leakshield.metrics.lpips import LPIPS, convert_lpips_weights, load_lpips
from leakshield.metrics.privacy import attack_success_rate, match_reconstructions
from leakshield.metrics.utility import accuracy, accuracy_degradation

METRICS = {
    "mse": "mean squared error per image, [0, 1] pixels (lower is better)",
    "psnr": "peak signal-to-noise ratio, dB, images clamped to [0, 1], data range 1, capped at 100 dB",
    "ssim": "structural similarity, Gaussian 11×11 σ 1.5, scikit-image convention (valid region)",
    "lpips": "learned perceptual distance (AlexNet/VGG), needs a local weights file; else n/a",
    "asr": "attack success rate: share of images with SSIM ≥ threshold (default 0.6)",
    "label_acc": "share of labels the attack recovered (matched images)",
    "accuracy": "test accuracy after FL training under the defense",
    "adr": "accuracy degradation ratio (acc_clean − acc_defended) / acc_clean",
}

__all__ = [
    "LPIPS",
    "METRICS",
    "accuracy",
    "accuracy_degradation",
    "attack_success_rate",
    "convert_lpips_weights",
    "load_lpips",
    "match_reconstructions",
    "mse",
    "psnr",
    "ssim",
]
