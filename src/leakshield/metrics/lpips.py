"""LPIPS (Zhang et al., CVPR 2018) with AlexNet / VGG-16 feature stacks defined here.

No weights ship with leakshield and nothing is downloaded. LPIPS needs one local ``.safetensors`` file
holding the backbone (torchvision's ``features.<i>.weight|bias`` keys) and the linear heads
(``lin<k>.weight`` of shape 1×C×1×1). :func:`convert_lpips_weights` builds that file from the files a user
may already have: torchvision's ImageNet backbone checkpoint and the ``lpips`` package's head file (both
read with ``torch.load(weights_only=True)``, never unpickled).

Distance: inputs in [0, 1] are mapped to [−1, 1] (the reference expects that range), shifted and scaled
per channel, passed through the backbone; at each tapped ReLU the features are unit-normalized along
channels, squared differences are weighted by the linear head and averaged spatially; layers are summed.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

import torch
from safetensors.torch import load_file, save_file
from torch import nn

from leakshield.errors import LeakshieldError

Net = Literal["alex", "vgg"]
_SHIFT = (-0.030, -0.088, -0.188)
_SCALE = (0.458, 0.448, 0.450)


def _alexnet_features() -> tuple[nn.Sequential, list[int], list[int]]:
    layers = nn.Sequential(
        nn.Conv2d(3, 64, 11, stride=4, padding=2),
        nn.ReLU(),
        nn.MaxPool2d(3, 2),
        nn.Conv2d(64, 192, 5, padding=2),
        nn.ReLU(),
        nn.MaxPool2d(3, 2),
        nn.Conv2d(192, 384, 3, padding=1),
        nn.ReLU(),
        nn.Conv2d(384, 256, 3, padding=1),
        nn.ReLU(),
        nn.Conv2d(256, 256, 3, padding=1),
        nn.ReLU(),
    )
    return layers, [1, 4, 7, 9, 11], [64, 192, 384, 256, 256]


def _vgg16_features() -> tuple[nn.Sequential, list[int], list[int]]:
    plan = [64, 64, "M", 128, 128, "M", 256, 256, 256, "M", 512, 512, 512, "M", 512, 512, 512]
    layers: list[nn.Module] = []
    cin = 3
    for item in plan:
        if item == "M":
            layers.append(nn.MaxPool2d(2, 2))
        else:
            layers += [nn.Conv2d(cin, int(item), 3, padding=1), nn.ReLU()]
            cin = int(item)
    return nn.Sequential(*layers), [3, 8, 15, 22, 29], [64, 128, 256, 512, 512]


_BACKBONES = {"alex": _alexnet_features, "vgg": _vgg16_features}


class LPIPS(nn.Module):
    """Learned perceptual distance; ``forward(a, b)`` returns one distance per image pair (N,)."""

    def __init__(self, net: Net = "alex") -> None:
        super().__init__()
        if net not in _BACKBONES:
            raise LeakshieldError(f"lpips net {net!r}; allowed: {', '.join(_BACKBONES)}")
        self.net = net
        self.features, self.taps, channels = _BACKBONES[net]()
        self.lins = nn.ModuleList(nn.Conv2d(c, 1, 1, bias=False) for c in channels)
        self.register_buffer("shift", torch.tensor(_SHIFT).view(1, 3, 1, 1))
        self.register_buffer("scale", torch.tensor(_SCALE).view(1, 3, 1, 1))
        self.requires_grad_(False)
        self.eval()

    def _tapped(self, x: torch.Tensor) -> list[torch.Tensor]:
        x = ((x * 2 - 1) - self.shift) / self.scale
        out = []
        for i, layer in enumerate(self.features[: self.taps[-1] + 1]):
            x = layer(x)
            if i in self.taps:
                out.append(x / (x.pow(2).sum(dim=1, keepdim=True).sqrt() + 1e-10))
        return out

    @torch.no_grad()
    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        if a.shape[1] == 1:
            a, b = a.expand(-1, 3, -1, -1), b.expand(-1, 3, -1, -1)
        dtype = self.shift.dtype
        fa, fb = self._tapped(a.clamp(0, 1).to(dtype)), self._tapped(b.clamp(0, 1).to(dtype))
        total = torch.zeros(len(a), dtype=dtype, device=a.device)
        for lin, xa, xb in zip(self.lins, fa, fb, strict=True):
            total = total + lin((xa - xb).pow(2)).mean(dim=(1, 2, 3))
        return total

    def state_for_file(self) -> dict[str, torch.Tensor]:
        """The tensors of the documented file format."""
        state = {f"features.{k}": v for k, v in self.features.state_dict().items()}
        state.update({f"lin{i}.weight": lin.weight for i, lin in enumerate(self.lins)})
        return {k: v.detach().contiguous() for k, v in state.items()}


def load_lpips(net: Net, path: str | Path) -> LPIPS:
    """LPIPS with weights from a local ``.safetensors`` file (see the module docstring)."""
    path = Path(path).expanduser()
    if not path.is_file():
        raise LeakshieldError(f"LPIPS weights file {path} not found")
    model = LPIPS(net)
    try:
        tensors = load_file(str(path))
    except Exception as exc:  # safetensors raises its own error types
        raise LeakshieldError(f"LPIPS weights file {path} is not a safetensors file: {exc}") from None
    expected = model.state_for_file()
    missing = sorted(set(expected) - set(tensors))
    if missing:
        raise LeakshieldError(
            f"LPIPS weights file {path} lacks {len(missing)} {net} tensors, e.g. {missing[0]}"
        )
    for key, ref in expected.items():
        if tensors[key].shape != ref.shape:
            raise LeakshieldError(
                f"LPIPS weights file {path}: {key} has shape "
                f"{tuple(tensors[key].shape)}, expected {tuple(ref.shape)}"
            )
    model.features.load_state_dict(
        {k.removeprefix("features."): v for k, v in tensors.items() if k.startswith("features.")}
    )
    for i, lin in enumerate(model.lins):
        lin.weight.copy_(tensors[f"lin{i}.weight"])
    return model


def convert_lpips_weights(
    backbone_checkpoint: str | Path,
    heads_checkpoint: str | Path,
    out: str | Path,
    net: Net = "alex",
) -> Path:
    """Write leakshield's LPIPS file from torchvision's backbone checkpoint (e.g.
    ``alexnet-owt-7be5be79.pth``, keys ``features.*``) and the lpips package's head file (e.g.
    ``alex.pth``, keys ``lin<k>.model.1.weight``). Both are read with ``weights_only=True``."""
    backbone = torch.load(backbone_checkpoint, map_location="cpu", weights_only=True)
    heads = torch.load(heads_checkpoint, map_location="cpu", weights_only=True)
    model = LPIPS(net)
    model.features.load_state_dict(
        {k.removeprefix("features."): v for k, v in backbone.items() if k.startswith("features.")}
    )
    for i, lin in enumerate(model.lins):
        lin.weight.copy_(heads[f"lin{i}.model.1.weight"])
    out = Path(out)
    save_file(model.state_for_file(), str(out))
    return out
