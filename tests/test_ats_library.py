"""ATS's 50 transformations and its policies (Gao et al., Table 1): each entry keeps the shape and the
[0, 1] range, is deterministic under a seed and has its visible effect; policies parse and validate."""

import pytest
import torch

from leakshield.defenses.ats import TABLE, Policy, PolicySet, describe_library, transformation
from leakshield.defenses.ats.policy import apply_policies, random_policy
from leakshield.errors import ConfigError


def _images(channels: int = 1, seed: int = 0) -> torch.Tensor:
    """Two 8-bit 32×32 images (PIL's equalize is the identity below 256 pixels): a smooth low-contrast
    gradient (values 0.2–0.6) with a bright square, and noise."""
    gen = torch.Generator().manual_seed(seed)
    ramp = torch.linspace(0.2, 0.6, 32).view(1, 1, 32).expand(channels, 32, 32).clone()
    ramp[:, 10:22, 10:22] = 0.55
    if channels == 3:
        ramp[0] *= 0.6
    noise = torch.rand(channels, 32, 32, generator=gen) * 0.5 + 0.25
    return (torch.stack([ramp, noise]) * 255).round() / 255


def _apply(index: int, x: torch.Tensor, sign: int = 1) -> torch.Tensor:
    policy = Policy.parse(str(index))
    return apply_policies(x, [policy] * len(x), torch.full((len(x), 3), sign))


def test_library_has_the_papers_50_entries():
    assert len(TABLE) == 50 and len(describe_library()) == 50
    assert transformation(3).operation == "translateX" and transformation(3).level == 9
    assert transformation(16).operation == "translateX"  # paper's Table 1 (the code has equalize)
    assert transformation(43).level == 4  # paper's Table 1 (the code has 3)
    with pytest.raises(IndexError, match="50 is out of range"):
        transformation(50)


@pytest.mark.parametrize("index", range(50))
def test_every_transformation_shape_range_determinism(index):
    for channels in (1, 3):
        x = _images(channels)
        policy = PolicySet.parse(str(index))
        a = policy.apply(x, torch.Generator().manual_seed(3))
        b = policy.apply(x, torch.Generator().manual_seed(3))
        assert a.shape == x.shape and a.dtype == x.dtype
        assert torch.equal(a, b)
        assert a.min() >= 0 and a.max() <= 1
        assert torch.allclose(a * 255, (a * 255).round(), atol=1e-4)  # 8-bit levels, as through PIL


@pytest.mark.parametrize("index", range(50))
def test_every_transformation_has_its_visible_effect(index):
    t = transformation(index)
    op, m = t.operation, t.magnitude
    x = _images(3)
    out, out_neg = _apply(index, x, 1), _apply(index, x, -1)
    white = torch.ones(1, 1, 32, 32)
    if op == "invert":
        assert torch.allclose(out, 1 - x, atol=1e-6)
    elif op in ("translateX", "translateY"):
        shift = int(m * 32)
        moved, moved_back = _apply(index, white, 1)[0, 0], _apply(index, white, -1)[0, 0]
        if op == "translateY":
            moved, moved_back = moved.T, moved_back.T
        assert shift >= 1
        assert (moved[:, -shift:] == 0).all() and (
            moved[:, : 32 - shift - 1] == 1
        ).all()  # black border right
        assert (moved_back[:, :shift] == 0).all() and (moved_back[:, shift + 1 :] == 1).all()  # and left
    elif op in ("shearX", "shearY"):
        sheared = _apply(index, white, 1)[0, 0]
        assert (sheared == 0).any() and (sheared == 1).any()
    elif op == "rotate":
        rotated = _apply(index, white, 1)[0, 0]
        assert rotated[0, 0] == pytest.approx(128 / 255) and rotated[16, 16] == 1
    elif op == "posterize":
        levels = (out * 255).round().long()
        assert (levels % (1 << (8 - int(m))) == 0).all() and not torch.equal(out, x)
    elif op == "solarize":
        threshold = int(m)
        x = (torch.linspace(0, 1, 32 * 32).view(1, 1, 32, 32) * 255).round() / 255  # every level
        out = _apply(index, x)
        expected = torch.where(x * 255 >= threshold, 1 - x, x)
        assert torch.allclose(out, expected, atol=1e-6)
        assert torch.equal(out, x) == (threshold >= 256)
    elif op == "autocontrast":
        assert out[0].min() == 0 and out[0].max() == 1  # the low-contrast ramp is stretched to [0, 1]
    elif op == "equalize":
        assert (out[0].max() - out[0].min()) > (x[0].max() - x[0].min()) + 0.2
    elif op in ("color", "contrast", "sharpness", "brightness"):
        if t.level == 0:
            assert torch.equal(out, x)
            return
        measure = {
            "color": lambda y: (y - y.mean(dim=1, keepdim=True)).abs().mean(),  # saturation
            "contrast": lambda y: y.std(),
            "sharpness": lambda y: (y[..., 1:] - y[..., :-1]).abs().mean(),  # edge energy
            "brightness": lambda y: y.mean(),
        }[op]
        assert measure(out) > measure(x) > measure(out_neg)
    else:  # pragma: no cover - every operation of the table is covered above
        raise AssertionError(op)


def test_color_is_the_identity_on_grey_images():
    x = _images(1)
    assert torch.equal(_apply(12, x), x)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("3-50-7", r"index 50 is out of range; allowed: 0\.\.49"),
        ("1-2-3-4", "at most 3"),
        ("", "expected policies"),
        ("3--7", "expected 1–3 indices"),
        ("3-x", r"'x' is not an index"),
        ("1-2+3-99", "index 99"),
    ],
)
def test_bad_policies_are_one_line_errors(text, message):
    with pytest.raises(ConfigError, match=message) as info:
        PolicySet.parse(text)
    assert "\n" not in str(info.value)


def test_hybrid_draws_one_policy_per_image_reproducibly():
    hybrid = PolicySet.parse("0+29-3")  # invert | invert then a shift: distinguishable
    assert str(hybrid) == "0+29-3" and len(hybrid.policies) == 2
    x = _images(1).repeat(16, 1, 1, 1)
    a = hybrid.apply(x, torch.Generator().manual_seed(1))
    b = hybrid.apply(x, torch.Generator().manual_seed(1))
    assert torch.equal(a, b)
    inverted_only = torch.tensor([torch.allclose(o, 1 - i, atol=1e-6) for o, i in zip(a, x, strict=True)])
    assert 0 < int(inverted_only.sum()) < len(x)  # both policies were drawn


def test_random_policies_are_seeded_and_within_the_library():
    a = random_policy(torch.Generator().manual_seed(5))
    assert str(a) == str(random_policy(torch.Generator().manual_seed(5)))
    assert len(a.ops) == 3 and all(0 <= t.index < 50 for t in a.ops)


def test_signs_of_the_magnitudes_are_plus_or_minus_one_both_drawn():
    """A survivor of mutation testing: the random sign of each operation's magnitude (±1, AutoAugment's
    random direction) was never checked."""
    which, signs = PolicySet.parse("3-1-7").draw(200, torch.Generator().manual_seed(0))
    assert which == [0] * 200 and signs.shape == (200, 3)
    assert set(signs.flatten().tolist()) == {-1, 1}
    assert 0.4 < (signs == 1).float().mean().item() < 0.6  # 600 fair draws: 0.5 ± 0.06 at 3σ


def test_random_policies_of_one_to_three_operations():
    assert [len(random_policy(torch.Generator().manual_seed(0), ops=k).ops) for k in (1, 2, 3)] == [1, 2, 3]
    for bad in (0, 4):
        with pytest.raises(ConfigError, match=r"allowed: 1\.\.3"):
            random_policy(torch.Generator().manual_seed(0), ops=bad)


def test_untransformed_images_are_clamped_quantized_and_keep_their_dtype():
    """Survivors of mutation testing: the None policy (an image left as it is, but through 8 bits), the
    clamp before the 8-bit conversion (values above 1 would wrap around) and the output's dtype."""
    x = torch.rand(2, 3, 8, 8, generator=torch.Generator().manual_seed(0), dtype=torch.float64) * 1.4 - 0.2
    out = apply_policies(x, [None, None], torch.ones(2, 3, dtype=torch.long))
    assert out.dtype == torch.float64  # the input's, not the 8-bit round trip's float32
    assert torch.allclose(out, (x.clamp(0, 1) * 255).round() / 255, atol=1e-6)
    with pytest.raises(ValueError, match="1- or 3-channel images, got 2 channels"):
        apply_policies(torch.rand(1, 2, 8, 8), [None], torch.ones(1, 3, dtype=torch.long))
