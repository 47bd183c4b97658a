"""LODA's feature extractor g (Wan et al., *Defense Against Gradient Leakage Attacks via Learning to
Obscure Data*, Sec. 4.1 and 5.1): a network trained on *public* data, of which the outputs of some
convolutional layers (the first k, all of them, or the last k plus the linear head) are the features
that Eq. 4 aligns. The same extractor is rebuilt by the defense and by the adaptive attack (it is
public): trained on the public split with the same settings, or read from a local safetensors file, and
cached as an artifact."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal

import pydantic
import torch
from torch import nn

from leakshield.artifacts import Artifact, ArtifactCache, FitKey, data_fingerprint
from leakshield.data.types import DatasetInfo, ImageSet
from leakshield.errors import ConfigError
from leakshield.models import create_model
from leakshield.registry import Params
from leakshield.weights import load_weights


class ExtractorParams(Params):
    """extractor, extractor_params: the architecture (a registered model; default DLG's LeNet with tanh, 3
    convolutions, which a CPU trains in seconds; the paper: ResNet-18). weights: a local .safetensors state
    dict (else it is trained on the public split). epochs: epochs of SGD on the public split (momentum 0.9,
    batches of 32). lr: their step. layers: ``first`` (the first ``count`` convolutional layers, LODA₁),
    ``all`` (every convolutional layer, LODA₂) or ``last`` (the last ``count``, LODA₃). count: how many
    convolutional layers. linear: with ``last``, also the linear head."""

    extractor: str = "lenet"
    extractor_params: dict[str, Any] = pydantic.Field(
        default_factory=lambda: {"activation": "tanh", "init_range": None}
    )
    weights: str | None = None
    epochs: int = pydantic.Field(default=30, ge=0)
    lr: float = pydantic.Field(default=0.01, gt=0)
    layers: Literal["first", "all", "last"] = "first"
    count: int = pydantic.Field(default=1, ge=1)
    linear: bool = False

    @pydantic.field_validator("weights")
    @classmethod
    def _weights_exist(cls, value: str | None) -> str | None:
        if value is not None and not Path(value).expanduser().is_file():
            raise ValueError(f"no file {value}")
        return value


def build_extractor(params: ExtractorParams, info: DatasetInfo, seed: int) -> nn.Module:
    return create_model(params.extractor, params.extractor_params, in_shape=info.shape,
                        num_classes=info.num_classes, seed=seed)  # fmt: skip


def train_extractor(params: ExtractorParams, info: DatasetInfo, public: ImageSet, seed: int) -> nn.Module:
    """The extractor trained on ``public`` (seeded), in eval mode."""
    net = build_extractor(params, info, seed).to(public.x.device).train()
    gen = torch.Generator().manual_seed(seed)
    x, y = info.normalize(public.x), public.y
    opt = torch.optim.SGD(net.parameters(), lr=params.lr, momentum=0.9)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        for _ in range(params.epochs):
            order = torch.randperm(len(x), generator=gen).to(x.device)
            for start in range(0, len(x), 32):
                batch = order[start : start + 32]
                loss = nn.functional.cross_entropy(net(x[batch]), y[batch])
                opt.zero_grad()
                loss.backward()
                opt.step()
    return net.eval()


def fitted_extractor(
    params: ExtractorParams,
    info: DatasetInfo,
    public: ImageSet,
    seed: int,
    cache: ArtifactCache | None,
    device: torch.device,
) -> nn.Module:
    """The extractor of ``params``: from ``weights``, else trained on the public split (cached)."""
    if params.weights is not None:
        net = load_weights(build_extractor(params, info, seed), params.weights, "weights")
        return net.to(device).eval()
    fields = params.model_dump(mode="json", include={"extractor", "extractor_params", "epochs", "lr"})
    key = FitKey("loda:extractor", fields, "public", data_fingerprint(public), seed)

    def fit() -> Artifact:
        net = train_extractor(params, info, public.to(device), seed)
        return Artifact({k: v.detach().cpu() for k, v in net.state_dict().items()})

    artifact = cache.get_or_fit(key, fit) if cache is not None else fit()
    net = build_extractor(params, info, seed)
    net.load_state_dict(dict(artifact.tensors))
    return net.to(device).eval()


def feature_map(net: nn.Module, params: ExtractorParams) -> Callable[[torch.Tensor], torch.Tensor]:
    """g: normalized images (N, C, H, W) → the selected layers' outputs, flattened and concatenated."""
    convs = [m for m in net.modules() if isinstance(m, nn.Conv2d)]
    if not convs:
        raise ConfigError(f"extractor: {params.extractor} has no convolutional layer for LODA's features")
    if params.layers == "first":
        chosen: list[nn.Module] = convs[: params.count]
    elif params.layers == "last":
        chosen = convs[-params.count :]
    else:
        chosen = convs
    if params.linear:
        chosen += [m for m in net.modules() if isinstance(m, nn.Linear)]
    last = max(list(net.modules()).index(m) for m in chosen)
    stop = list(net.modules())[last]

    def g(x: torch.Tensor) -> torch.Tensor:
        outputs: list[torch.Tensor] = []

        def keep(module: nn.Module, _: Any, out: torch.Tensor) -> None:
            outputs.append(out.flatten(1))
            if module is stop:
                raise _Done

        handles = [m.register_forward_hook(keep) for m in chosen]
        try:
            net(x)
        except _Done:
            pass
        finally:
            for h in handles:
                h.remove()
        return torch.cat(outputs, dim=1)

    return g


class _Done(Exception):  # noqa: N818  (control flow, not an error)
    """Stops the forward once the last selected layer has run."""
