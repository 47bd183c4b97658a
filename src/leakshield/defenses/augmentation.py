"""Standard data augmentation, the "standard" row of ATS's tables (Gao et al., CVPR 2021, Table 2):
random crop with zero padding and random horizontal flip, drawn per image and per minibatch.

The paper pads CIFAR's 32-px images by 4 px; here the padding is a fraction of the image side, 1/8 by
default, so a 16-px run shifts by 2 px and a 224-px one by 28, the same defense at every size (4 px on
16-px digits shifted by up to a quarter of the image and cost 37 points of accuracy). The flip is the
dataset's choice (:attr:`~leakshield.data.DatasetInfo.mirror_keeps_class`): on digits a mirrored 2 is
no digit, so the default does not flip there."""

from __future__ import annotations

import pydantic
import torch
import torch.nn.functional as F

from leakshield.defenses.base import DEFENSES, ClientContext, Defense
from leakshield.errors import ConfigError
from leakshield.registry import Params


class AugmentationParams(Params):
    """padding: zero padding before the random crop back to the input size, as a fraction of the
    image's side (1/8: the paper's 4 px at 32 px; 0 = no crop); padding_pixels: the same in pixels,
    overriding it (at most half the side). flip: flip each image horizontally with probability 1/2
    (None: where the dataset's mirror keeps the class — not on digits)."""

    padding: float = pydantic.Field(default=0.125, ge=0.0)
    padding_pixels: int | None = pydantic.Field(default=None, ge=0)
    flip: bool | None = None

    @pydantic.field_validator("padding")
    @classmethod
    def _a_fraction(cls, value: float) -> float:
        if value > 0.5:  # a config written when padding counted pixels (0.2: padding: 4)
            given = f"{value:g}"
            raise ValueError(
                f"{given} is not a fraction of the image side (at most 0.5); padding counts pixels no "
                f"more: write padding_pixels: {given}, or padding: 0.125"
            )
        return value

    def pixels(self, side: int) -> int:
        """The padding in pixels for images of ``side`` pixels (one-line error where it exceeds half)."""
        if self.padding_pixels is None:
            return round(self.padding * side)
        if self.padding_pixels > side // 2:
            most, given = side // 2, self.padding_pixels
            raise ConfigError(f"augmentation: padding_pixels {given} exceeds half the image side "
                              f"({side} px); use at most {most}, or padding as a fraction")  # fmt: skip
        return self.padding_pixels


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
    summary="random crop (zero padding 1/8 of the side) + horizontal flip where the dataset allows "
    "[padding 0.125, flip by dataset]",
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
        p = self.params
        flip = context.info.mirror_keeps_class if p.flip is None else p.flip
        return random_crop_flip(x, p.pixels(min(x.shape[-2:])), flip, context.generator), y
