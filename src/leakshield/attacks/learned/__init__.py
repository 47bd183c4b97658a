"""Attackers that learn (:mod:`.attack`: an inversion network trained against the defense on public
pairs; :mod:`.guide`: a diffusion prior that denoises what another attack recovers)."""

from leakshield.attacks.learned import attack, guide  # noqa: F401  (register learned-inversion, guide)
