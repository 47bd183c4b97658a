"""FSIM, the feature-similarity index (Zhang et al., IEEE TIP 2011, Eq. 4–7), per image.

ATS filters the policies that distort images too much with FSIM before scoring them (Gao et al., ATS,
Sec. 4.3). Here FSIM is computed on the luminance of images in [0, 1] scaled to 0..255:

* phase congruency PC from Kovesi's log-Gabor filters (``phasepack``: 4 scales, 6 orientations, shortest
  wavelength 6, scale factor 2, σ_f 0.5978, the settings the ATS authors' FSIM library uses), averaged
  over orientations so that PC lies in [0, 1] as in Zhang et al.;
* gradient magnitude G from the Scharr operator divided by 16 (Zhang et al.'s code);
* S_PC = (2·PC₁PC₂ + T1)/(PC₁² + PC₂² + T1), S_G likewise with T2 (T1 0.85, T2 160), and
  FSIM = Σ S_PC·S_G·PC_m / Σ PC_m with PC_m = max(PC₁, PC₂).

Identical images score 1; an image against a flat one scores near 0.
"""

from __future__ import annotations

import warnings

import numpy as np
import torch
from scipy import ndimage

T1 = 0.85
T2 = 160.0
SCHARR = np.array([[3.0, 0.0, -3.0], [10.0, 0.0, -10.0], [3.0, 0.0, -3.0]]) / 16.0
LUMINANCE = (0.299, 0.587, 0.114)


def _phase_congruency(image: np.ndarray) -> np.ndarray:
    with warnings.catch_warnings():
        # phasepack warns once that pyfftw is missing and falls back on scipy's FFT, which is fine here
        warnings.simplefilter("ignore")
        from phasepack import phasecong

        pc = phasecong(image, nscale=4, norient=6, minWaveLength=6, mult=2, sigmaOnf=0.5978)[4]
    # a flat image has no local energy: phasepack's 0/0 there is no congruency
    return np.nan_to_num(np.mean(np.stack(pc), axis=0), nan=0.0)


def _gradient_magnitude(image: np.ndarray) -> np.ndarray:
    gx = ndimage.correlate(image, SCHARR, mode="nearest")
    gy = ndimage.correlate(image, SCHARR.T, mode="nearest")
    return np.sqrt(gx**2 + gy**2)


def _luminance(image: torch.Tensor) -> np.ndarray:
    x = image.detach().cpu().double().clamp(0, 1) * 255.0
    if x.shape[0] == 3:
        x = sum(w * x[c] for c, w in enumerate(LUMINANCE))
    elif x.shape[0] == 1:
        x = x[0]
    else:
        raise ValueError(f"FSIM compares 1- or 3-channel images, got {x.shape[0]} channels")
    return x.numpy()


def fsim_pair(a: torch.Tensor, b: torch.Tensor) -> float:
    """FSIM of two C×H×W images in [0, 1] (C 1 or 3)."""
    if a.shape != b.shape or a.ndim != 3:
        raise ValueError(
            f"expected two C×H×W images of equal shape, got {tuple(a.shape)} and {tuple(b.shape)}"
        )
    y1, y2 = _luminance(a), _luminance(b)
    pc1, pc2 = _phase_congruency(y1), _phase_congruency(y2)
    g1, g2 = _gradient_magnitude(y1), _gradient_magnitude(y2)
    s_pc = (2 * pc1 * pc2 + T1) / (pc1**2 + pc2**2 + T1)
    s_g = (2 * g1 * g2 + T2) / (g1**2 + g2**2 + T2)
    pc_m = np.maximum(pc1, pc2)
    if pc_m.sum() <= 0:  # no phase-congruent structure in either image (flat or pure noise): equal weights
        pc_m = np.ones_like(pc_m)
    return float((s_pc * s_g * pc_m).sum() / pc_m.sum())


def fsim(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Per-image FSIM (N,) of two N×C×H×W batches in [0, 1]."""
    if a.shape != b.shape or a.ndim != 4:
        raise ValueError(
            f"expected two N×C×H×W batches of equal shape, got {tuple(a.shape)} and {tuple(b.shape)}"
        )
    return torch.tensor([fsim_pair(x, y) for x, y in zip(a, b, strict=True)], dtype=torch.float64)
