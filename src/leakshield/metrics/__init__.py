"""Metrics: image similarity (MSE, PSNR, SSIM, LPIPS), privacy (ASR, matching), utility (accuracy, ADR)."""

from leakshield.metrics.image import mse, psnr, ssim
from leakshield.metrics.lpips import LPIPS, convert_lpips_weights, load_lpips
from leakshield.metrics.privacy import attack_success_rate, match_reconstructions
from leakshield.metrics.registry import METRICS, MetricSpec
from leakshield.metrics.utility import accuracy, accuracy_degradation

__all__ = [
    "LPIPS",
    "METRICS",
    "MetricSpec",
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
