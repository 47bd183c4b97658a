"""A Vision Transformer (Dosovitskiy et al., ICLR 2021) small enough for CPU, with the paper geometries
beside it.

The image is cut into ``patch × patch`` tiles, each mapped linearly to ``dim`` (a convolution with
kernel = stride = patch), a class token is prepended and a learnable positional embedding added; then
``depth`` encoder blocks, a final LayerNorm, and the class token's state goes to the classifier.

``first_block`` chooses the first block's design: ``pre-norm`` is the standard ViT block
(x + MSA(LN(x)), then x + MLP(LN(x))); ``attention-first`` meets the precondition of APRIL's closed form
through the attention weights (Lu et al., CVPR 2022, Fig. 1A, whose blocks stack attention, norm and MLP
VGG-style): the first block's attention reads the embeddings themselves, with no LayerNorm before it and
no residual around it (MSA(x), then x + MLP(LN(x))). Every other block is pre-norm. No dropout, no
in-place operation; attention is written out (softmax of QKᵀ/√d times V) so that second-order
gradients, which gradient-matching attacks take, exist.
"""

from __future__ import annotations

import math
from typing import Literal

import pydantic
import torch
from torch import nn

from leakshield.models.base import FeatureClassifier
from leakshield.models.registry import MODELS
from leakshield.registry import Params


class SelfAttention(nn.Module):
    """Multi-head self-attention with one fused ``qkv`` projection (rows: queries, keys, values)."""

    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        if dim % heads:
            raise ValueError(f"dim {dim} is not divisible by heads {heads}")
        self.heads = heads
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        n, tokens, dim = x.shape
        q, k, v = self.qkv(x).view(n, tokens, 3, self.heads, dim // self.heads).permute(2, 0, 3, 1, 4)
        weights = torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(dim // self.heads), dim=-1)
        return self.proj((weights @ v).transpose(1, 2).reshape(n, tokens, dim))


class EncoderBlock(nn.Module):
    """One encoder block; ``attention_first``: the attention reads its input without LayerNorm or a
    residual around it (APRIL Fig. 1A), else the standard pre-norm block."""

    def __init__(self, dim: int, heads: int, mlp_ratio: float, attention_first: bool = False) -> None:
        super().__init__()
        self.attention_first = attention_first
        self.norm1: nn.Module = nn.Identity() if attention_first else nn.LayerNorm(dim)
        self.attn = SelfAttention(dim, heads)
        self.norm2 = nn.LayerNorm(dim)
        hidden = max(1, round(dim * mlp_ratio))
        self.mlp = nn.Sequential(nn.Linear(dim, hidden), nn.GELU(), nn.Linear(hidden, dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        attended = self.attn(self.norm1(x))
        x = attended if self.attention_first else x + attended
        return x + self.mlp(self.norm2(x))


class VisionTransformerFeatures(nn.Module):
    """Patch embedding, class token, positional embedding, encoder blocks, LayerNorm; returns the class
    token's final state (N, dim). ``pos_embed`` holds one row per token, the class token's first."""

    def __init__(
        self,
        in_shape: tuple[int, int, int],
        patch: int,
        dim: int,
        depth: int,
        heads: int,
        mlp_ratio: float,
        attention_first: bool,
    ) -> None:
        super().__init__()
        channels, height, width = in_shape
        if patch > min(height, width):
            raise ValueError(f"patch {patch} is larger than the {height}×{width} image")
        if height % patch or width % patch:
            raise ValueError(f"a {height}×{width} image does not split into {patch}×{patch} patches")
        self.patch = patch
        self.grid = (height // patch, width // patch)
        self.patch_embed = nn.Conv2d(channels, dim, patch, stride=patch)
        self.cls_token = nn.Parameter(torch.zeros(1, 1, dim))
        self.pos_embed = nn.Parameter(torch.zeros(1, 1 + self.grid[0] * self.grid[1], dim))
        nn.init.trunc_normal_(self.pos_embed, std=0.02)
        nn.init.trunc_normal_(self.cls_token, std=0.02)
        self.blocks = nn.Sequential(
            *(EncoderBlock(dim, heads, mlp_ratio, attention_first and i == 0) for i in range(depth))
        )
        self.norm = nn.LayerNorm(dim)

    @property
    def tokens(self) -> int:
        return self.pos_embed.shape[1]

    def embed(self, x: torch.Tensor) -> torch.Tensor:
        """The first block's input: [class token; patch embeddings] + positional embedding (N, T, dim)."""
        patches = self.patch_embed(x).flatten(2).transpose(1, 2)
        cls = self.cls_token.expand(len(x), -1, -1)
        return torch.cat([cls, patches], dim=1) + self.pos_embed

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.norm(self.blocks(self.embed(x)))[:, 0]


class ViTParams(Params):
    """The ViT's geometry: ``patch`` (tile side in pixels; it must divide the image), ``dim`` (token
    width), ``depth`` (encoder blocks), ``heads`` (attention heads; they divide ``dim``), ``mlp_ratio``
    (MLP width / dim) and ``first_block`` (``pre-norm``, the standard block, or ``attention-first``,
    APRIL's Fig. 1A)."""

    patch: int = pydantic.Field(
        default=4, ge=1, description="patch side in pixels (it must divide the image)"
    )
    dim: int = pydantic.Field(default=128, ge=1, description="token width")
    depth: int = pydantic.Field(default=4, ge=1, description="encoder blocks")
    heads: int = pydantic.Field(default=4, ge=1, description="attention heads (they must divide dim)")
    mlp_ratio: float = pydantic.Field(default=2.0, gt=0, description="hidden width of each MLP / dim")
    first_block: Literal["pre-norm", "attention-first"] = pydantic.Field(
        default="pre-norm",
        description="pre-norm: the standard block; attention-first: the first attention reads the "
        "embeddings directly (APRIL's Fig. 1A precondition)",
    )

    @pydantic.model_validator(mode="after")
    def _heads_divide_dim(self) -> ViTParams:
        if self.dim % self.heads:
            raise ValueError(f"dim {self.dim} is not divisible by heads {self.heads}: give heads dividing it")
        return self


@MODELS.register(
    "vit",
    summary="Vision Transformer: patch embedding, class token, learnable positions, pre-norm blocks",
    reference="Dosovitskiy et al., ICLR 2021; attention-first block: Lu et al., APRIL, CVPR 2022 (Fig. 1A)",
    params=ViTParams,
    aliases={
        "vit-april": {"first_block": "attention-first"},
        "vit-s": {"dim": 384, "depth": 12, "heads": 6, "mlp_ratio": 4.0},
        "vit-b": {"dim": 768, "depth": 12, "heads": 12, "mlp_ratio": 4.0},
    },
)
def vit(params: ViTParams, in_shape: tuple[int, int, int], num_classes: int) -> nn.Module:
    features = VisionTransformerFeatures(
        in_shape,
        params.patch,
        params.dim,
        params.depth,
        params.heads,
        params.mlp_ratio,
        params.first_block == "attention-first",
    )
    return FeatureClassifier(features, nn.Linear(params.dim, num_classes))
