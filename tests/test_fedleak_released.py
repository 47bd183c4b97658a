"""FedLeak as released (Fan et al., USENIX Security 2025): the image generator it searches, its double
optimizer step and the median filter on its output (tiny cases, and one small real one)."""

from __future__ import annotations

import pytest
import torch

import leakshield.attacks.passive.fedleak as fedleak_module
from leakshield.attacks import create_attack
from leakshield.attacks.passive.fedleak import PIXEL_PORT, FedLeakParams
from leakshield.attacks.passive.fedleak_generator import (
    FedLeakGenerator,
    SpectralConv2d,
    median_filter,
    released_search,
    stage_width,
)
from leakshield.fl.observation import server_view_of
from leakshield.metrics import match_reconstructions, ssim
from leakshield.models import create_model

#: the release's defaults, but a narrow generator: seconds on one CPU thread
SMALL = {"generator_width": 16}


def _view(digits16, rows):
    model = create_model("lenet", {"activation": "tanh", "init_range": None}, in_shape=digits16.info.shape,
                         num_classes=10, seed=0)  # fmt: skip
    data = digits16.train.subset(list(rows))
    return server_view_of(model, data, digits16.info, labels_known=True, seed=0), data


# -- the generator ---------------------------------------------------------------------------------------
def test_the_generator_has_the_releases_stages_and_maps_codes_to_images_in_0_1():
    torch.manual_seed(0)
    g = FedLeakGenerator((3, 32, 32), width=16, latent=8)
    assert g.resolution == 32 and len(g.blocks) == 4  # 4, 8, 16, 32 px
    images = g(torch.randn(5, 8))
    assert images.shape == (5, 3, 32, 32)
    assert float(images.detach().min()) > 0 and float(images.detach().max()) < 1  # a sigmoid out
    # the width: full up to 32 px, half at 64, a quarter from 128 on (the release's 256 → 128 → 64 → 64)
    assert [stage_width(r, 256) for r in (4, 32, 64, 128, 256)] == [256, 256, 128, 64, 64]
    big = FedLeakGenerator((3, 128, 128), width=16, latent=8)
    assert [b[0].out_channels for b in big.blocks] == [16, 16, 16, 16, 8, 4]
    # leakshield's sizes: grey, 16 px, and a size not a power of two generated at the next one
    assert FedLeakGenerator((1, 16, 16), width=8, latent=4)(torch.randn(2, 4)).shape == (2, 1, 16, 16)
    odd = FedLeakGenerator((1, 28, 28), width=8, latent=4)
    assert odd.resolution == 32 and odd(torch.randn(2, 4)).shape == (2, 1, 28, 28)
    # no activation works in place (the double backward of the matching needs their inputs)
    assert not any(getattr(m, "inplace", False) for m in big.modules())


def test_spectral_convolutions_divide_the_weight_by_its_largest_singular_value():
    torch.manual_seed(0)
    conv = SpectralConv2d(4, 6, 3, padding=1)
    x = torch.randn(2, 4, 5, 5)
    for _ in range(30):  # one power iteration a forward: the estimate converges
        out = conv(x)
    sigma = torch.linalg.matrix_norm(conv.weight.detach().flatten(1), ord=2)
    expected = torch.nn.functional.conv2d(x, conv.weight / sigma, conv.bias, padding=1)
    assert torch.allclose(out, expected, atol=1e-4)
    out.sum().backward()  # the gradient reaches the weight
    assert conv.weight.grad is not None and float(conv.weight.grad.abs().sum()) > 0


# -- the median filter -----------------------------------------------------------------------------------
def test_the_median_filter_removes_salt_noise_with_a_5x5_window():
    image = torch.full((1, 1, 12, 12), 0.25)
    salty = image.clone()
    salty[0, 0, 2, 3] = salty[0, 0, 7, 9] = salty[0, 0, 0, 0] = 1.0  # isolated salt, one in a corner
    assert torch.equal(median_filter(salty, 5), image)
    # a 3×3 square: a 3×3 window keeps its centre (9 of 9 white), a 5×5 window removes it (9 of 25)
    square = torch.zeros(1, 1, 12, 12)
    square[0, 0, 4:7, 4:7] = 1.0
    assert float(median_filter(square, 3)[0, 0, 5, 5]) == 1.0
    assert float(median_filter(square, 5).max()) == 0.0
    assert torch.equal(median_filter(square, 0), square) and torch.equal(median_filter(square, 1), square)
    assert median_filter(torch.rand(2, 3, 4, 4), 5).shape == (2, 3, 4, 4)  # smaller than the window


def test_the_filter_is_applied_once_to_the_final_images(digits16):
    view, _ = _view(digits16, range(2))
    plain = create_attack("fedleak", {**SMALL, "iterations": 3, "median_filter": 0}).reconstruct(view, seed=0)
    rec = create_attack("fedleak", {**SMALL, "iterations": 3}).reconstruct(view, seed=0)  # 5×5 by default
    assert torch.allclose(rec.images, median_filter(plain.images, 5), atol=1e-5)
    assert not torch.allclose(rec.images, plain.images, atol=1e-3)
    assert not torch.allclose(rec.images, median_filter(plain.images, 3), atol=1e-3)
    assert rec.stats["grad_distance"] == pytest.approx(plain.stats["grad_distance"])  # before the filter


# -- the double step ------------------------------------------------------------------------------------
def _one_step(optimizer: str, decay: float, regularization: float = 0.3) -> torch.Tensor:
    p = FedLeakParams(optimizer=optimizer, lr=0.5, weight_decay=decay, iterations=1, lr_schedule="none")
    centre = torch.tensor([0.0, 0.0, 10.0])
    x = torch.tensor([2.0, 0.3, 9.0], requires_grad=True)

    def objective(images):
        loss = ((images - centre) ** 2).sum()
        return loss, loss

    released_search(p, [x], lambda: x, objective, regularization=regularization)
    return x.detach()


@pytest.mark.parametrize(("optimizer", "decay"), [("adam", 0.0), ("adamw", 0.1)])
def test_the_look_ahead_is_one_optimizer_step_and_the_step_a_second_one(optimizer, decay):
    """By hand: the signed gradient s = (+, +, −); the first Adam step (lr 0.5) reaches the look-ahead
    point (1.5, −0.2, 9.5), where coordinate 1 has overshot (sign −); back at the start, the second step
    goes along b = 0.7·s + 0.3·sign g(ahead) = (1, 0.4, −1) with moments that have already seen s."""
    b1, b2, lr, eps = 0.9, 0.999, 0.5, 1e-8
    s = torch.tensor([1.0, 1.0, -1.0])
    b = torch.tensor([1.0, 0.4, -1.0])
    m = (b1 * (1 - b1) * s + (1 - b1) * b) / (1 - b1**2)
    v = (b2 * (1 - b2) * s**2 + (1 - b2) * b**2) / (1 - b2**2)
    x0 = torch.tensor([2.0, 0.3, 9.0])
    # AdamW's decay acts on the restored start (the look-ahead's decay is undone with its step)
    expected = x0 * (1 - lr * decay) - lr * m / (v.sqrt() + eps)
    assert torch.allclose(_one_step(optimizer, decay), expected, atol=1e-6)
    # coordinate 1 steps 0.90·lr: a single step with fresh moments would step the full lr
    assert float(m[1] / (v[1].sqrt() + eps)) == pytest.approx(0.8986, abs=1e-3)
    # λ = 0: one plain signed step
    assert torch.allclose(_one_step(optimizer, decay, 0.0), x0 * (1 - lr * decay) - lr * s, atol=1e-6)


# -- the search through the generator ---------------------------------------------------------------------
def test_the_search_moves_a_generator_and_returns_its_images(digits16, monkeypatch):
    made: list[torch.nn.Module] = []
    outputs: list[torch.Tensor] = []

    class Recorded(FedLeakGenerator):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            made.append(self)

        def forward(self, codes):
            out = super().forward(codes)
            outputs.append(out.detach().clone())
            return out

    monkeypatch.setattr(fedleak_module, "FedLeakGenerator", Recorded)
    view, _ = _view(digits16, range(2))
    params = {**SMALL, "iterations": 4, "median_filter": 0, "lr": 0.05}
    rec = create_attack("fedleak", params).reconstruct(view, seed=0)
    assert len(made) == 1 and made[0].training  # batch statistics, as in the release
    assert len(outputs) == 1 + 4 * 2 + 1  # the start, here and the look-ahead per step, the end
    assert any(torch.allclose(rec.images, out, atol=1e-5) for out in outputs)  # the images are G(z)
    # the generator's parameters moved (the search's variables), and its images with them
    assert not torch.allclose(outputs[0], outputs[-1], atol=1e-4)
    again = create_attack("fedleak", params).reconstruct(view, seed=0)
    assert torch.equal(again.images, rec.images)  # seeded
    pixels = create_attack("fedleak", {**params, "parameterization": "pixels"}).reconstruct(view, seed=0)
    assert len(made) == 2  # pixels: no generator
    assert not torch.allclose(pixels.images, rec.images, atol=1e-3)


def test_released_fedleak_recovers_digits_at_a_cpu_budget(digits16):
    """Batch 2 at 16 px, the release's configuration but a generator 16 channels wide and 100 steps."""
    view, data = _view(digits16, range(2))
    rec = create_attack("fedleak", {**SMALL, "iterations": 100}).reconstruct(view, seed=0)
    order = match_reconstructions(rec.images, data.x)
    matched = ssim(rec.images[order], data.x)
    # better than chance: each image resembles its own digit more than the batch's other one
    crossed = ssim(rec.images[order].flip(0), data.x)
    assert float(matched.mean()) > 0.8, matched  # 0.93 and 0.86
    assert bool((matched > crossed + 0.2).all()), (matched, crossed)


def test_the_pixel_port_and_the_options_are_validated():
    assert FedLeakParams(**PIXEL_PORT).parameterization == "pixels"
    with pytest.raises(ValueError, match="lookahead_step: signed"):
        FedLeakParams(lookahead_step="signed")  # the generator takes the release's look-ahead
    with pytest.raises(ValueError, match="lookahead_step: signed"):
        FedLeakParams(parameterization="pixels", lookahead_step="signed")  # with adamw
    with pytest.raises(ValueError, match="odd"):
        FedLeakParams(median_filter=4)
    released = FedLeakParams()
    assert (released.parameterization, released.lookahead_step, released.optimizer) == (
        "generator", "optimizer", "adamw"
    )  # fmt: skip
    assert (released.lr, released.weight_decay, released.median_filter, released.iterations) == (
        0.01, 0.01, 5, 10_000
    )  # fmt: skip
    assert (released.generator_width, released.latent_dim, released.regularization) == (256, 128, 0.3)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU")
def test_the_generator_search_runs_on_the_device_of_the_model(digits16):
    view, _ = _view(digits16, range(2))
    view.model.cuda()  # the engine moves the update to the model's device
    rec = create_attack("fedleak", {**SMALL, "iterations": 2}).reconstruct(view, seed=0)
    assert rec.images.shape == (2, 1, 16, 16) and rec.images.device.type == "cpu"


def test_the_leaderboard_pins_the_pixel_port():
    """Every preset's ``fedleak`` is the pixel port (the generator costs seconds a step on a CPU), so the
    published rows keep measuring what they measured: its options equal :data:`PIXEL_PORT`'s."""
    from importlib.resources import files

    import yaml

    presets = yaml.safe_load(files("leakshield.configs").joinpath("leaderboard.yaml").read_text())["presets"]
    pinned = {name: p["params"]["fedleak"] for name, p in presets.items() if "fedleak" in p.get("params", {})}
    assert {"quick", "standard", "full"} <= set(pinned)
    for name, params in pinned.items():
        assert {k: params.get(k) for k in PIXEL_PORT} == PIXEL_PORT, name
