import pytest
import torch
from torch import nn

from leakshield.cli import main
from leakshield.models import FeatureClassifier, create_model, list_models

ALL_MODELS = [
    "antigan-cnn",
    "convnet",
    "lenet",
    "lenet4",
    "mlp",
    "resnet18",
    "resnet20",
    "vit",
]  # the SPEC models and Anti-GAN Table 6
SMALL = {
    "convnet": {"width": 4},
    "resnet18": {"width": 8},
    "mlp": {"width": 32},
    "vit": {"dim": 32, "heads": 2},
}


def test_every_model_is_registered_and_listed(capsys):
    assert list_models() == ALL_MODELS
    assert main(["list", "models"]) == 0
    out = capsys.readouterr().out
    assert all(name in out for name in ALL_MODELS)


@pytest.mark.parametrize("name", ALL_MODELS)
@pytest.mark.parametrize("shape", [(1, 28, 28), (3, 32, 32)])
def test_output_shape(name, shape):
    model = create_model(name, SMALL.get(name), in_shape=shape, num_classes=7)
    model.eval()
    assert model(torch.rand(2, *shape)).shape == (2, 7)
    assert isinstance(model, FeatureClassifier)
    assert not any(getattr(m, "inplace", False) for m in model.modules()), "in-place ops break Opacus"


def test_reference_feature_sizes():
    assert create_model("lenet", in_shape=(3, 32, 32), num_classes=10).feature_dim == 768
    assert create_model("lenet", in_shape=(1, 28, 28), num_classes=10).feature_dim == 588
    assert create_model("convnet", {"width": 32}, in_shape=(3, 32, 32), num_classes=10).feature_dim == 36 * 32
    convs = [
        m
        for m in create_model("convnet", {"width": 4}, in_shape=(3, 32, 32), num_classes=10).modules()
        if isinstance(m, nn.Conv2d)
    ]
    assert len(convs) == 8
    assert create_model("resnet20", in_shape=(3, 32, 32), num_classes=10).feature_dim == 64
    dmlp = create_model("dmlp", in_shape=(3, 32, 32), num_classes=10)
    assert sum(isinstance(m, nn.Linear) for m in dmlp.modules()) == 5


def test_seeded_init_is_reproducible_and_lenet_uniform():
    a = create_model("lenet", in_shape=(3, 32, 32), num_classes=10, seed=3)
    b = create_model("lenet", in_shape=(3, 32, 32), num_classes=10, seed=3)
    c = create_model("lenet", in_shape=(3, 32, 32), num_classes=10, seed=4)
    for pa, pb, pc in zip(a.parameters(), b.parameters(), c.parameters(), strict=True):
        assert torch.equal(pa, pb) and not torch.equal(pa, pc)
        assert float(pa.detach().abs().max()) <= 0.5
    assert any(float(p.detach().abs().max()) > 0.45 for p in a.parameters())
    state = torch.get_rng_state()
    create_model("resnet20", in_shape=(3, 32, 32), num_classes=10, seed=1)
    assert torch.equal(state, torch.get_rng_state()), "the global RNG must be untouched"
