"""The one-shot ε estimate of Andrew, Kairouz, Oh, Oprea, McMahan & Suriyakumar (*One-shot Empirical
Privacy Estimation for Federated Learning*, ICLR 2024, §3): fit a Gaussian to the scores (cosines) of
the inserted canaries and another to those of the held-out canaries, and report the ε at which the pair
N(μ_in, σ_in²), N(μ_out, σ_out²) is (ε, δ)-indistinguishable — what an adversary who knew both score
distributions could tell apart, read from one training run.

It is an estimate, not a bound: the fit may be wrong in the tails. Its interval here is a percentile
bootstrap over the canaries (both sets resampled), which measures the estimate's spread, not the
error of the Gaussian assumption. The rigorous counterpart is :mod:`leakshield.dpaudit.lower_bound`.

The pair's privacy profile is computed in closed form: the set where log p/q > ε is bounded by the roots
of a quadratic, and δ(ε) = max(P(R) − e^ε Q(R), the same with P and Q exchanged)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy.special import ndtr

#: ε is searched in [0, EPS_CAP]; an estimate at the cap means "at least this"
EPS_CAP = 200.0


def _mass(lo: np.ndarray, hi: np.ndarray, mu: np.ndarray, sd: np.ndarray) -> np.ndarray:
    """P(lo < X < hi) for X ~ N(mu, sd²) (lo, hi may be ±inf); an upper tail from the mirrored lower
    one, since 1 − Φ(z) loses every digit of a small tail."""
    z_lo, z_hi = (lo - mu) / sd, (hi - mu) / sd
    return np.clip(np.where(z_lo > 0, ndtr(-z_lo) - ndtr(-z_hi), ndtr(z_hi) - ndtr(z_lo)), 0.0, 1.0)


def _hockey_stick(
    eps: np.ndarray, mu_p: np.ndarray, sd_p: np.ndarray, mu_q: np.ndarray, sd_q: np.ndarray
) -> np.ndarray:
    """H_ε(P‖Q) = ∫ (p − e^ε q)₊ for P = N(mu_p, sd_p²), Q = N(mu_q, sd_q²), elementwise."""
    # log p − log q − ε = a x² + b x + c
    a = 1 / (2 * sd_q**2) - 1 / (2 * sd_p**2)
    b = mu_p / sd_p**2 - mu_q / sd_q**2
    c = -(mu_p**2) / (2 * sd_p**2) + mu_q**2 / (2 * sd_q**2) + np.log(sd_q / sd_p) - eps
    inf = np.full_like(a, np.inf)
    linear = np.abs(a) < 1e-12 * (np.abs(b) + 1 / sd_p**2)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        x0 = -c / b
        disc = b**2 - 4 * a * c
        root = np.sqrt(np.maximum(disc, 0))
        r1, r2 = (-b - root) / (2 * a), (-b + root) / (2 * a)
        lo_root, hi_root = np.minimum(r1, r2), np.maximum(r1, r2)
        scale = np.exp(eps)

        def region(lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
            return _mass(lo, hi, mu_p, sd_p) - scale * _mass(lo, hi, mu_q, sd_q)

        lin = np.where(
            b > 0, region(x0, inf), np.where(b < 0, region(-inf, x0), np.where(c > 0, 1 - scale, 0))
        )
        outside = np.where(disc > 0, region(-inf, lo_root) + region(hi_root, inf), 1 - scale)  # a > 0
        inside = np.where(disc > 0, region(lo_root, hi_root), 0.0)  # a < 0
        value = np.where(linear, lin, np.where(a > 0, outside, inside))
    return np.maximum(np.nan_to_num(value, nan=0.0), 0.0)


def gaussian_pair_delta(
    eps: np.ndarray | float,
    mu_in: np.ndarray | float,
    sd_in: np.ndarray | float,
    mu_out: np.ndarray | float,
    sd_out: np.ndarray | float,
) -> np.ndarray:
    """δ(ε) of the pair N(mu_in, sd_in²), N(mu_out, sd_out²): the larger hockey-stick divergence of the
    two orders (elementwise over broadcast arrays)."""
    args = np.broadcast_arrays(
        *(np.asarray(v, dtype=np.float64) for v in (eps, mu_in, sd_in, mu_out, sd_out))
    )
    e, m1, s1, m0, s0 = (np.array(v) for v in args)
    return np.maximum(_hockey_stick(e, m1, s1, m0, s0), _hockey_stick(e, m0, s0, m1, s1))


def gaussian_pair_epsilon(
    mu_in: np.ndarray | float,
    sd_in: np.ndarray | float,
    mu_out: np.ndarray | float,
    sd_out: np.ndarray | float,
    delta: float,
) -> np.ndarray:
    """The smallest ε with δ(ε) ≤ ``delta`` for the pair (bisection; δ(ε) decreases in ε), capped at
    :data:`EPS_CAP`."""
    if not (np.all(np.asarray(sd_in) > 0) and np.all(np.asarray(sd_out) > 0)):
        raise ValueError("gaussian_pair_epsilon: the standard deviations must be > 0")
    m1, s1, m0, s0 = np.broadcast_arrays(
        *(np.asarray(v, dtype=np.float64) for v in (mu_in, sd_in, mu_out, sd_out))
    )
    lo, hi = np.zeros(m1.shape), np.full(m1.shape, EPS_CAP)
    for _ in range(40):  # [0, 200] to 2e-10
        mid = (lo + hi) / 2
        above = gaussian_pair_delta(mid, m1, s1, m0, s0) > delta
        lo, hi = np.where(above, mid, lo), np.where(above, hi, mid)
    done = gaussian_pair_delta(0.0, m1, s1, m0, s0) <= delta
    return np.where(done, 0.0, hi)


@dataclass(frozen=True)
class Estimate:
    """ε estimate with its bootstrap interval (``low``, ``high``) and the fitted means and stds."""

    epsilon: float
    low: float
    high: float
    mu_in: float
    sd_in: float
    mu_out: float
    sd_out: float


def _fit(scores: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    return scores.mean(-1), np.maximum(scores.std(-1, ddof=1), 1e-12)


def one_shot_estimate(
    in_scores: np.ndarray,
    out_scores: np.ndarray,
    delta: float,
    *,
    resamples: int = 1000,
    confidence: float = 0.95,
    seed: int = 0,
) -> Estimate:
    """Andrew et al.'s ε from the inserted canaries' scores (``in_scores``) and the held-out ones'
    (``out_scores``), at ``delta``, with a percentile-bootstrap interval of ``confidence``."""
    x, y = np.asarray(in_scores, dtype=np.float64), np.asarray(out_scores, dtype=np.float64)
    if not (np.isfinite(x).all() and np.isfinite(y).all()):
        raise ValueError("one_shot_estimate: a score is not finite (the run diverged?)")
    if len(x) < 2 or len(y) < 2:
        raise ValueError(
            f"one_shot_estimate: {len(x)} inserted and {len(y)} held-out scores; at least 2 each"
        )
    (m1, s1), (m0, s0) = _fit(x), _fit(y)
    eps = float(gaussian_pair_epsilon(m1, s1, m0, s0, delta))
    rng = np.random.default_rng(seed)
    bx = x[rng.integers(0, len(x), (resamples, len(x)))]
    by = y[rng.integers(0, len(y), (resamples, len(y)))]
    (bm1, bs1), (bm0, bs0) = _fit(bx), _fit(by)
    boot = gaussian_pair_epsilon(bm1, bs1, bm0, bs0, delta)
    tail = (1 - confidence) / 2
    low, high = np.quantile(boot, [tail, 1 - tail])
    return Estimate(eps, float(low), float(high), float(m1), float(s1), float(m0), float(s0))
