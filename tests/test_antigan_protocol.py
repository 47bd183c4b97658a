"""Anti-GAN's protocol (Luo & Zhang, TKDD 2025, Sec. 5): the dropout baseline after each layer (Sec. 5.3),
an attacker that switches off dropout in its own copy of the model, and Adam 1e-4 for every network."""

from __future__ import annotations

import pytest
import torch
import yaml

from leakshield.attacks import create_attack
from leakshield.data import load_dataset
from leakshield.defenses import DefensePipeline, create_defense
from leakshield.defenses.dropout import ActiveDropout
from leakshield.errors import ConfigError
from leakshield.fl import LocalTraining
from leakshield.models import create_model

from helpers import CONFIGS


@pytest.fixture(scope="module")
def digits():
    return load_dataset("digits", {"channels": 1, "size": 16})


def _with_dropout(digits, **params):
    model = create_model("antigan-cnn", in_shape=digits.info.shape, num_classes=10, seed=0)
    return DefensePipeline([create_defense("dropout", params)]).model_hook(model, seed=0)


def test_every_layer_dropout_follows_each_activation(digits):
    model = _with_dropout(digits, placement="every-layer", p=0.5)
    layers = [m for m in model.modules() if isinstance(m, ActiveDropout)]
    activations = [m for m in model.modules() if isinstance(m, torch.nn.ReLU)]
    assert len(layers) == len(activations) == 3  # Table 6: two conv ReLUs and the hidden ReLU
    for name, module in model.named_modules():
        if isinstance(module, torch.nn.Sequential) and any(isinstance(m, ActiveDropout) for m in module):
            assert isinstance(module[0], torch.nn.ReLU) and isinstance(module[1], ActiveDropout), name
    single = _with_dropout(digits)
    assert sum(isinstance(m, ActiveDropout) for m in single.modules()) == 1
    assert isinstance(single.classifier[0], ActiveDropout)
    with pytest.raises(ConfigError, match="activation modules"):
        plain = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(4, 2))
        create_defense("dropout", {"placement": "every-layer"}).model_hook(plain)


def test_the_gan_attacker_switches_dropout_off_in_its_own_discriminator(digits):
    model = _with_dropout(digits, placement="every-layer", p=0.5)
    mine = digits.train.subset((digits.train.y >= 5).nonzero().flatten().tolist()[:20])
    x = digits.info.normalize(digits.public.x[:4])
    outputs = {}
    for off in (True, False):
        attack = create_attack("hitaj", {"width": 8, "dropout_off": off})
        attacker = attack.participant(1, mine, LocalTraining(batch_size=20), digits.info, seed=0)
        D = attacker.discriminator(model)
        with torch.enable_grad():
            outputs[off] = (D(x.requires_grad_(True)), D(x))
    assert torch.equal(*outputs[True])  # no mask: the same logits twice
    assert not torch.allclose(*outputs[False])  # the defense's mask would make D a noisy copy
    # the client's own model keeps its mask: switching it off on D's copy never reaches the client
    assert all(not m.inference for m in model.modules() if isinstance(m, ActiveDropout))


def test_the_antigan_config_trains_every_network_with_adam_1e_4():
    config = yaml.safe_load((CONFIGS / "antigan.yaml").read_text())
    local = config["fl"]["local"]
    assert (local["optimizer"], local["local_lr"]) == ("adam", 1e-4)
    hitaj = [a for a in config["attacks"] if isinstance(a, dict) and a["name"].startswith("hitaj")]
    assert hitaj and all(a.get("lr", 1e-4) == 1e-4 for a in hitaj)
    dropout = [d for d in config["defenses"] if isinstance(d, dict) and d["name"] == "dropout"]
    assert dropout and all(d["placement"] == "every-layer" for d in dropout)
    assert create_defense("antigan", {}).params.lr == 1e-4
