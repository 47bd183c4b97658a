"""ATS policies: ``"a-b-c"`` applies library entries a, b, c in sequence (at most 3); a hybrid set
``"a-b-c+d-e-f"`` draws one of its policies per image (Gao et al., ATS, Sec. 4.4–4.5 and Algorithm 2).
Images go through PIL as 8-bit pictures, as in the authors' pipeline; every random choice (the policy
of a hybrid set, the sign of each signed magnitude) comes from a torch generator, so a seed fixes the
result."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch
from PIL import Image

from leakshield.defenses.ats.library import GEOMETRIC, LIBRARY_SIZE, Transformation, transformation
from leakshield.errors import ConfigError

MAX_OPS = 3


@dataclass(frozen=True)
class Policy:
    """A sequence of 1–3 library entries, applied in order."""

    ops: tuple[Transformation, ...]

    @classmethod
    def parse(cls, text: str) -> Policy:
        """``"3-1-7"`` → entries 3, 1, 7. One-line errors name the bad part."""
        parts = text.strip().split("-")
        if not text.strip() or any(not p.strip() for p in parts):
            raise ConfigError(f"policy {text!r}: expected 1–{MAX_OPS} indices joined by '-', e.g. '3-1-7'")
        if len(parts) > MAX_OPS:
            raise ConfigError(f"policy {text!r}: {len(parts)} operations; at most {MAX_OPS}")
        indices = []
        for part in parts:
            if not part.strip().isdigit():
                raise ConfigError(
                    f"policy {text!r}: {part!r} is not an index; allowed: 0..{LIBRARY_SIZE - 1}"
                )
            index = int(part)
            if index >= LIBRARY_SIZE:
                raise ConfigError(
                    f"policy {text!r}: index {index} is out of range; allowed: 0..{LIBRARY_SIZE - 1}"
                )
            indices.append(index)
        return cls(tuple(transformation(i) for i in indices))

    @property
    def geometric(self) -> bool:
        """Whether an entry moves pixels (and leaves a fill)."""
        return any(t.operation in GEOMETRIC for t in self.ops)

    def __str__(self) -> str:
        return "-".join(str(t.index) for t in self.ops)

    def apply_image(self, image: Image.Image, signs: Sequence[int]) -> Image.Image:
        """Apply every entry to a PIL image; ``signs[k]`` (±1) is the sign of entry k's magnitude."""
        for op, sign in zip(self.ops, signs, strict=False):
            image = op(image, sign)
        return image


@dataclass(frozen=True)
class PolicySet:
    """One or more policies; each image is transformed by one of them, drawn uniformly (hybrid)."""

    policies: tuple[Policy, ...]

    @classmethod
    def parse(cls, text: str) -> PolicySet:
        """``"21-13-3+15-48-15"`` → two policies."""
        if not isinstance(text, str) or not text.strip():
            raise ConfigError(
                "policies: expected policies like '3-1-7' joined by '+', e.g. '21-13-3+15-48-15'"
            )
        return cls(tuple(Policy.parse(part) for part in text.split("+")))

    def __str__(self) -> str:
        return "+".join(str(p) for p in self.policies)

    def draw(self, n: int, generator: torch.Generator) -> tuple[list[int], torch.Tensor]:
        """For ``n`` images: the policy of each and the signs (n × 3, ±1) of their magnitudes."""
        device = generator.device
        which = torch.randint(len(self.policies), (n,), generator=generator, device=device).cpu().tolist()
        signs = torch.randint(0, 2, (n, MAX_OPS), generator=generator, device=device).cpu() * 2 - 1
        return which, signs

    def apply(self, x: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
        """Transform a batch ``x`` (N×C×H×W in [0, 1], C 1 or 3): one policy per image, drawn with
        ``generator``; returns the batch in [0, 1] (8-bit levels) on ``x``'s device and dtype."""
        which, signs = self.draw(len(x), generator)
        return apply_policies(x, [self.policies[i] for i in which], signs)


def to_pil(image: torch.Tensor) -> Image.Image:
    """C×H×W in [0, 1] → an 8-bit PIL image (L for one channel, RGB for three)."""
    array = (image.detach().cpu().float().clamp(0, 1) * 255).round().to(torch.uint8).numpy()
    if array.shape[0] == 1:
        return Image.fromarray(array[0], mode="L")
    if array.shape[0] == 3:
        return Image.fromarray(np.ascontiguousarray(array.transpose(1, 2, 0)), mode="RGB")
    raise ValueError(f"ATS transforms 1- or 3-channel images, got {array.shape[0]} channels")


def from_pil(image: Image.Image) -> torch.Tensor:
    """An 8-bit PIL image → C×H×W float in [0, 1]."""
    array = torch.from_numpy(np.asarray(image, dtype=np.float32) / 255.0)
    return array.unsqueeze(0) if array.ndim == 2 else array.permute(2, 0, 1).contiguous()


def apply_policies(x: torch.Tensor, policies: Sequence[Policy | None], signs: torch.Tensor) -> torch.Tensor:
    """Image i through ``policies[i]`` (None: unchanged but quantized to 8 bits) with ``signs[i]``."""
    out = []
    for image, policy, sign in zip(x, policies, signs.tolist(), strict=True):
        pil = to_pil(image)
        out.append(from_pil(policy.apply_image(pil, sign) if policy is not None else pil))
    return torch.stack(out).to(device=x.device, dtype=x.dtype)


def random_policy(generator: torch.Generator, ops: int = MAX_OPS, *, exact: bool = False) -> Policy:
    """A policy drawn uniformly from the search space of policies of *at most* ``ops`` entries (Sec. 4.4:
    Σ_{i≤k} 50^i policies, so a length L has probability 50^L / Σ 50^i), entries with repetition
    (Algorithm 1). ``exact``: always ``ops`` entries."""
    if not 1 <= ops <= MAX_OPS:
        raise ConfigError(f"ops: {ops}; allowed: 1..{MAX_OPS}")
    length = ops
    if not exact:
        sizes = torch.tensor([float(LIBRARY_SIZE**n) for n in range(1, ops + 1)], dtype=torch.float64)
        length = 1 + int(torch.multinomial(sizes / sizes.sum(), 1, generator=generator))
    indices = torch.randint(LIBRARY_SIZE, (length,), generator=generator).tolist()
    return Policy(tuple(transformation(i) for i in indices))


def shares_functions(a: Policy, b: Policy) -> bool:
    """Whether two policies use a common library entry (a hybrid set may not, Sec. 4.5)."""
    return bool({t.index for t in a.ops} & {t.index for t in b.ops})
