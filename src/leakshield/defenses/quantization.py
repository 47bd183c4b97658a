"""Quantization of the released update (communication compression as a defense baseline)."""

from __future__ import annotations

from typing import Literal

import torch

from leakshield.defenses.base import DEFENSES, ClientContext, Defense
from leakshield.registry import Params


class QuantizationParams(Params):
    """format: ``fp16`` (half precision) or ``int8`` (symmetric per-tensor scale max|Δ|/127, rounded)."""

    format: Literal["fp16", "int8"] = "fp16"


def quantize_int8(values: torch.Tensor) -> torch.Tensor:
    """Symmetric per-tensor int8 quantization, returned dequantized: round(v/s)·s, s = max|v| / 127."""
    scale = values.abs().max() / 127
    if scale == 0:
        return values.clone()
    return torch.clamp(torch.round(values / scale), -127, 127) * scale


@DEFENSES.register(
    "quantization",
    summary="rounds the released update to fp16 or int8 [fp16]",
    reference="compression baseline (Zhu et al., NeurIPS 2019, Sec. 5 discuss low precision)",
    params=QuantizationParams,
)
class Quantization(Defense):
    """Release stage: the server receives the dequantized values of the quantized update."""

    params: QuantizationParams

    def release_hook(
        self, update: dict[str, torch.Tensor], context: ClientContext
    ) -> dict[str, torch.Tensor]:
        if self.params.format == "fp16":
            return {k: v.half().to(v.dtype) for k, v in update.items()}
        return {k: quantize_int8(v) for k, v in update.items()}
