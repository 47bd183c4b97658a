"""Standard data augmentation, the "standard" row of ATS's tables (Gao et al., CVPR 2021, Table 2):
random crop with zero padding and random horizontal flip, drawn per image and per minibatch."""

from __future__ import annotations

import pydantic
import torch
import torch.nn.functional as F

from leakshield.defenses.base import DEFENSES, ClientContext, Defense
from leakshield.registry import Params


class AugmentationParams(Params):
    """padding: pixels of zero padding before the random crop back to the input size (0 = no crop).
    flip: flip each image horizontally with probability 1/2."""

    padding: int = pydantic.Field(default=4, ge=0)
    flip: bool = True


def random_crop_flip(x: torch.Tensor, padding: int, flip: bool, generator: torch.Generator) -> torch.Tensor:
    """Per image: pad by ``padding`` with zeros, crop a random window of the original size, maybe flip."""
    n, _, h, w = x.shape
    out = x
    if padding:
        padded = F.pad(x, (padding, padding, padding, padding))
        offsets = torch.randint(
            0, 2 * padding + 1, (n, 2), generator=generator, device=generator.device
        ).tolist()
        out = torch.stack([padded[i, :, dy : dy + h, dx : dx + w] for i, (dy, dx) in enumerate(offsets)])
    if flip:
        flips = torch.rand(n, generator=generator, device=generator.device).to(x.device) < 0.5
        out = torch.where(flips[:, None, None, None], out.flip(-1), out)
    return out


@DEFENSES.register(
    "augmentation",
    summary="random crop (zero padding 4) + horizontal flip of every training image [padding 4, flip]",
    reference="Gao et al., ATS, CVPR 2021, Table 2 ('standard' augmentation row)",
    params=AugmentationParams,
    aliases={"standard-augmentation": {}},
)
class Augmentation(Defense):
    """Data stage: every minibatch is augmented afresh (the transformation is secret, its family public)."""

    params: AugmentationParams

    def data_hook(
        self, x: torch.Tensor, y: torch.Tensor, context: ClientContext
    ) -> tuple[torch.Tensor, torch.Tensor]:
        return random_crop_flip(x, self.params.padding, self.params.flip, context.generator), y
