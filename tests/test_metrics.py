"""Image, privacy and utility metrics; SSIM against scikit-image; LPIPS from a local weights file."""

import math

import pytest
import torch
import torch.nn.functional as F
from skimage.metrics import structural_similarity

from leakshield.errors import LeakshieldError
from leakshield.metrics import (
    LPIPS,
    accuracy_degradation,
    attack_success_rate,
    convert_lpips_weights,
    load_lpips,
    match_reconstructions,
    mse,
    psnr,
    ssim,
)


def _skimage_ssim(a: torch.Tensor, b: torch.Tensor) -> float:
    return structural_similarity(
        a.double().numpy(),
        b.double().numpy(),
        gaussian_weights=True,
        sigma=1.5,
        use_sample_covariance=False,
        data_range=1,
        channel_axis=0,
    )


def _pairs(digits3) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """100 pairs spanning SSIM's range: independent noise, noisy copies at several noise levels,
    identical pairs, real digits against their blurred copies (grey and RGB)."""
    g = torch.Generator().manual_seed(0)
    digits = digits3.train.x[:40]
    pairs = []
    for i in range(20):  # independent noise
        shape = (3, 32, 32) if i % 2 else (1, 32, 32)
        pairs.append((torch.rand(shape, generator=g), torch.rand(shape, generator=g)))
    for i, sigma in enumerate([0.01, 0.03, 0.1, 0.3, 0.6] * 6):  # noisy copies
        clean = digits[i]
        pairs.append((clean, (clean + sigma * torch.randn(clean.shape, generator=g)).clamp(0, 1)))
    for i in range(10):  # identical
        pairs.append((digits[i], digits[i].clone()))
    kernel = torch.ones(3, 1, 3, 3) / 9
    for i in range(30):  # digits vs their blurred copies (box blur, 1 or 2 passes)
        x = digits[i + 10]
        blurred = F.conv2d(x.unsqueeze(0), kernel, padding=1, groups=3)
        if i % 2:
            blurred = F.conv2d(blurred, kernel, padding=1, groups=3)
        pairs.append((x, blurred[0]))
    for i in range(10):  # grey digits vs shifted copies
        x = digits[i, :1]
        pairs.append((x, torch.roll(x, shifts=(1, 2), dims=(1, 2))))
    assert len(pairs) == 100
    return pairs


def test_ssim_agrees_with_scikit_image_on_100_pairs(digits3):
    pairs = _pairs(digits3)
    ours = [float(ssim(a.unsqueeze(0), b.unsqueeze(0))) for a, b in pairs]
    ref = [_skimage_ssim(a, b) for a, b in pairs]
    assert max(abs(o - r) for o, r in zip(ours, ref, strict=True)) < 1e-4
    assert min(ref) < 0.05 and max(ref) == pytest.approx(1.0)  # the whole range was covered


def test_ssim_rejects_tiny_images():
    with pytest.raises(ValueError, match="at least 11"):
        ssim(torch.rand(1, 1, 8, 8), torch.rand(1, 1, 8, 8))


def test_psnr_and_mse_known_values():
    a = torch.zeros(2, 1, 4, 4)
    b = torch.full((2, 1, 4, 4), 0.1)
    assert torch.allclose(mse(a, b), torch.full((2,), 0.01, dtype=torch.float64))
    assert torch.allclose(psnr(a, b), torch.full((2,), 20.0, dtype=torch.float64))
    assert float(psnr(a, a)[0]) == pytest.approx(100.0)  # floored MSE
    assert float(psnr(a, torch.full_like(a, 2.0))[0]) == pytest.approx(0.0)  # clamped to [0, 1]


def test_matching_recovers_a_permutation():
    g = torch.Generator().manual_seed(1)
    truth = torch.rand(5, 1, 16, 16, generator=g)
    perm = torch.tensor([3, 0, 4, 1, 2])
    rec = truth[perm] + 0.01 * torch.randn(5, 1, 16, 16, generator=g)
    for metric in ("ssim", "psnr", "mse"):
        order = match_reconstructions(rec, truth, metric)
        assert torch.allclose(rec[order], truth, atol=0.05)


def test_asr_and_adr():
    assert attack_success_rate(torch.tensor([0.59, 0.6, 0.9, 0.1])) == 0.5
    assert attack_success_rate(torch.tensor([0.59, 0.6]), threshold=0.5) == 1.0
    assert accuracy_degradation(0.8, 0.6) == pytest.approx(0.25)
    assert accuracy_degradation(0.8, 0.8) == 0.0 and accuracy_degradation(0.5, 0.6) < 0  # a defense may help
    assert math.isnan(accuracy_degradation(0.0, 0.5))


@pytest.mark.parametrize("net", ["alex", "vgg"])
def test_lpips_from_documented_file(tmp_path, net):
    torch.manual_seed(0)
    reference = LPIPS(net)
    for p in reference.parameters():
        p.data.uniform_(0, 0.1) if p.ndim == 4 and p.shape[0] == 1 else p.data.normal_(0, 0.05)
    path = tmp_path / f"lpips_{net}.safetensors"
    from safetensors.torch import save_file

    save_file(reference.state_for_file(), str(path))
    model = load_lpips(net, path)
    a, b = torch.rand(3, 3, 32, 32), torch.rand(3, 3, 32, 32)
    d = model(a, b)
    assert d.shape == (3,) and torch.all(d > 0)
    assert torch.allclose(model(a, a), torch.zeros(3), atol=1e-7)
    assert float(model(a[:1, :1], b[:1, :1])[0]) >= 0  # grey images are repeated to RGB


def test_lpips_is_zhang_et_als_eq_1_written_out():
    """Eq. 1 of Zhang et al. (CVPR 2018) computed by hand: [0, 1] → [−1, 1], the reference's per-channel
    shift and scale, the backbone's tapped ReLUs unit-normalized along channels, squared differences
    weighted per channel by the heads, averaged over positions and summed over layers."""
    torch.manual_seed(3)
    model = LPIPS("alex")
    for p in model.parameters():
        p.data.uniform_(0, 0.1) if p.ndim == 4 and p.shape[0] == 1 else p.data.normal_(0, 0.05)
    a, b = torch.rand(2, 3, 64, 64), torch.rand(2, 3, 64, 64)
    shift = torch.tensor([-0.030, -0.088, -0.188]).view(1, 3, 1, 1)
    scale = torch.tensor([0.458, 0.448, 0.450]).view(1, 3, 1, 1)
    fa, fb = (2 * a - 1 - shift) / scale, (2 * b - 1 - shift) / scale
    expected = torch.zeros(2)
    for i, layer in enumerate(model.features[: model.taps[-1] + 1]):
        fa, fb = layer(fa), layer(fb)
        if i in model.taps:
            unit_a = fa / fa.norm(dim=1, keepdim=True).clamp_min(1e-10)
            unit_b = fb / fb.norm(dim=1, keepdim=True).clamp_min(1e-10)
            weights = model.lins[model.taps.index(i)].weight.view(1, -1, 1, 1)
            expected += (weights * (unit_a - unit_b) ** 2).sum(dim=1).mean(dim=(1, 2))
    assert len(model.taps) == 5
    assert torch.allclose(model(a, b), expected, rtol=1e-4)


#: torchvision's ``features`` of AlexNet and VGG-16 (the keys and shapes a real weights file holds), the
#: LPIPS taps (relu1..relu5 / relu1_2..relu5_3) and their spatial sizes on a 64×64 input
TORCHVISION = {
    "alex": ({0: (64, 3, 11, 11), 3: (192, 64, 5, 5), 6: (384, 192, 3, 3), 8: (256, 384, 3, 3),
              10: (256, 256, 3, 3)}, [1, 4, 7, 9, 11], [15, 7, 3, 3, 3]),
    "vgg": ({0: (64, 3, 3, 3), 2: (64, 64, 3, 3), 5: (128, 64, 3, 3), 7: (128, 128, 3, 3),
             10: (256, 128, 3, 3), 12: (256, 256, 3, 3), 14: (256, 256, 3, 3), 17: (512, 256, 3, 3),
             19: (512, 512, 3, 3), 21: (512, 512, 3, 3), 24: (512, 512, 3, 3), 26: (512, 512, 3, 3),
             28: (512, 512, 3, 3)}, [3, 8, 15, 22, 29], [64, 32, 16, 8, 4]),
}  # fmt: skip


@pytest.mark.parametrize("net", ["alex", "vgg"])
def test_lpips_backbones_are_torchvisions_layouts(net):
    """A real weights file only fits torchvision's layers: every weight's shape, the tapped ReLUs and the
    strides and paddings (the feature maps' sizes), the heads' one weight per channel and no bias."""
    weights, taps, sizes = TORCHVISION[net]
    model = LPIPS(net)
    state = model.state_for_file()
    assert {int(k.split(".")[1]): tuple(v.shape) for k, v in state.items() if k.endswith("weight")
            and k.startswith("features.")} == weights  # fmt: skip
    assert model.taps == taps and all(isinstance(model.features[i], torch.nn.ReLU) for i in taps)
    assert [lin.weight.shape for lin in model.lins] == [(1, weights[i - 1][0], 1, 1) for i in taps]
    assert all(lin.bias is None for lin in model.lins)
    x = torch.rand(1, 3, 64, 64)
    found = []
    for i, layer in enumerate(model.features[: taps[-1] + 1]):
        x = layer(x)
        if i in taps:
            found.append(x.shape[-1])
    assert found == sizes
    assert model.shift.shape == model.scale.shape == (1, 3, 1, 1)
    with pytest.raises(LeakshieldError, match="allowed: alex, vgg"):
        LPIPS("squeeze")


def test_lpips_file_errors(tmp_path):
    with pytest.raises(LeakshieldError, match="not found"):
        load_lpips("alex", tmp_path / "missing.safetensors")
    bad = tmp_path / "bad.safetensors"
    bad.write_bytes(b"not a safetensors file")
    with pytest.raises(LeakshieldError, match="not a safetensors"):
        load_lpips("alex", bad)


def test_convert_reference_checkpoints(tmp_path):
    torch.manual_seed(1)
    source = LPIPS("alex")
    backbone = {f"features.{k}": v.clone().normal_() for k, v in source.features.state_dict().items()}
    backbone["classifier.1.weight"] = torch.zeros(2, 2)  # torchvision also stores the classifier
    heads = {f"lin{i}.model.1.weight": torch.rand_like(lin.weight) for i, lin in enumerate(source.lins)}
    torch.save(backbone, tmp_path / "alexnet.pth")
    torch.save(heads, tmp_path / "alex.pth")
    out = convert_lpips_weights(
        tmp_path / "alexnet.pth", tmp_path / "alex.pth", tmp_path / "lpips.safetensors"
    )
    model = load_lpips("alex", out)
    assert torch.equal(model.lins[2].weight, heads["lin2.model.1.weight"])
    assert torch.equal(model.features[0].weight, backbone["features.0.weight"])


def test_accuracy_counts_the_top_1_class_and_restores_the_mode():
    """Top-1 accuracy: a model whose logits favour class (x's first pixel > 0.5) is right on exactly the
    images labelled that way."""
    from torch import nn

    from leakshield.data.types import ImageSet
    from leakshield.metrics.utility import accuracy

    class Threshold(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.unused = nn.Parameter(torch.zeros(1))

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            high = (x.flatten(1)[:, 0] > 0.5).float()
            return torch.stack([1 - high, high, torch.full_like(high, -5.0)], dim=1)

    x = torch.tensor([0.1, 0.9, 0.7, 0.2]).view(4, 1, 1, 1)
    model = Threshold().train()
    data = ImageSet(x, torch.tensor([0, 1, 0, 2]))  # right, right, wrong, wrong
    assert accuracy(model, data, normalize=lambda t: t, batch_size=3) == 0.5
    assert model.training  # the caller's mode comes back


def test_metric_kinds_select_their_metrics_and_names_are_unique():
    """Survivors of mutation testing: the registry's kind filter and its duplicate check."""
    from leakshield.metrics import METRICS
    from leakshield.metrics.registry import MetricRegistry, MetricSpec

    utility = METRICS.of_kind("utility")
    assert "accuracy" in utility and "ssim" not in utility
    assert all(METRICS.get(name).kind == "utility" for name in utility)
    registry = MetricRegistry()
    registry.register(MetricSpec("a", "first", "privacy", True))
    assert registry.names() == ["a"] and "a" in registry
    with pytest.raises(ValueError, match="registered twice"):
        registry.register(MetricSpec("a", "again", "privacy", True))
    assert registry.get("a").summary == "first" and [s.name for s in registry] == ["a"]
    assert METRICS.precision("psnr") == 2 and METRICS.precision("psnr_std") == 2  # a derived column
    assert METRICS.precision("not-a-metric", default=5) == 5
    assert "ssim_max" in METRICS and "not-a-metric" not in METRICS and 3 not in METRICS


def test_matching_edges_one_truth_colour_images_nan_scores_and_asr_sizes():
    """Survivors of mutation testing: one truth among several reconstructions is matched (no shortcut),
    colour images with fewer truths than channels, a NaN reconstruction is never preferred (even to one
    of negative SSIM), the default metric is SSIM, and ASR of one value and of none."""
    g = torch.Generator().manual_seed(4)
    truth = torch.rand(1, 3, 16, 16, generator=g)
    recs = torch.stack([1 - truth[0], torch.rand(3, 16, 16, generator=g), truth[0]])
    assert match_reconstructions(recs, truth).tolist() == [2]
    assert torch.equal(match_reconstructions(recs, truth), match_reconstructions(recs, truth, "ssim"))
    two = torch.rand(2, 3, 16, 16, generator=g)
    assert match_reconstructions(two.flip(0), two).tolist() == [1, 0]
    inverted = 1 - truth
    assert ssim(inverted, truth).item() < 0  # a finite but anti-correlated guess…
    broken = torch.full_like(truth, float("nan"))
    assert match_reconstructions(torch.cat([broken, inverted]), truth).tolist() == [1]  # …beats NaN
    assert attack_success_rate(torch.tensor([0.7])) == 1.0
    assert math.isnan(attack_success_rate(torch.tensor([])))


def test_image_metric_edges_clamping_range_size_and_shape():
    """Survivors of mutation testing: PSNR and SSIM clamp to the data range (values outside it count as
    its edge), SSIM scales C1 and C2 with ``data_range`` (scikit-image's convention), an 11-pixel image
    is large enough, and a 3-D input is refused."""
    g = torch.Generator().manual_seed(6)
    a, b = (
        torch.rand(2, 1, 12, 12, generator=g) * 1.6 - 0.3,
        torch.rand(2, 1, 12, 12, generator=g) * 1.6 - 0.3,
    )
    assert torch.allclose(psnr(a, b), psnr(a.clamp(0, 1), b.clamp(0, 1)))
    assert torch.allclose(ssim(a, b), ssim(a.clamp(0, 1), b.clamp(0, 1)))
    x, y = 0.05 * torch.rand(1, 1, 11, 11, generator=g), 0.05 * torch.rand(1, 1, 11, 11, generator=g)  # dark
    assert torch.allclose(ssim(2 * x, 2 * y, data_range=2.0), ssim(x, y), atol=1e-6)
    assert ssim(x, y).item() == pytest.approx(_skimage_ssim(x[0], y[0]), abs=1e-5)
    with pytest.raises(ValueError, match="N×C×H×W"):
        ssim(x[0], y[0])
