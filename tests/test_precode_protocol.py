"""PRECODE's own protocol (Scheliga et al., WACV 2022, Sec. 4): IGA with TV 1e-6, unsigned Adam lr 0.01,
up to 7,000 steps stopped after 1,200 without a lower loss (``iga-precode``); MSE in the normalized input
space (``mse_normalized``); the engine's ``patience`` on both of its Adam paths."""

from __future__ import annotations

import math

import pytest
import torch
import yaml

from leakshield.attacks import ATTACKS, create_attack
from leakshield.attacks.base import Reconstruction
from leakshield.attacks.passive.inversion.loops import optimize_many, optimize_one
from leakshield.data import load_dataset
from leakshield.defenses import DefensePipeline, create_defense
from leakshield.experiment.evaluation import score_reconstructions
from leakshield.experiment.sections import MetricSection
from leakshield.fl import server_view_of
from leakshield.metrics import ssim
from leakshield.metrics.image import mse, mse_normalized
from leakshield.models import create_model

from helpers import CONFIGS


def test_iga_precode_is_the_papers_attack_setting():
    p = ATTACKS.validate("iga-precode")
    got = (
        p.distance,
        p.optimizer,
        p.lr,
        p.signed,
        p.boxed,
        p.tv,
        p.lr_schedule,
        p.iterations,
        p.patience,
        p.init,
    )
    assert got == ("cosine", "adam", 0.01, False, True, 1e-6, "milestones", 7000, 1200, "randn")
    assert ATTACKS.validate("ig").patience == 0  # every other preset runs its whole budget


class CountingObjective:
    """loss 1 whatever x (zero gradient): the run never improves after its first step."""

    def __init__(self) -> None:
        self.calls = 0

    def __call__(self, x, logits):
        self.calls += 1
        loss = (x * 0).sum() + 1.0
        return loss, loss.detach()


def test_patience_stops_a_run_that_no_longer_improves():
    lo, hi = torch.full((1, 1, 2, 2), -1.0), torch.full((1, 1, 2, 2), 1.0)
    for patience, calls in ((5, 5 + 1 + 1), (0, 100 + 1)):  # + the final evaluation of the last iterate
        p = ATTACKS.validate("iga-precode", {"iterations": 100, "patience": patience})
        objective = CountingObjective()
        optimize_one(p, torch.zeros(1, 1, 2, 2), None, objective, lo, hi)
        assert objective.calls == calls


class TwoVictims:
    """Victim 0's loss is 1 until its pixel passes 5 (it moves +1 per SGD step), then 0; victim 1's loss
    falls at every step. With patience 3, victim 0 stops after three steps and must stay below 5."""

    def __init__(self) -> None:
        self.t = 0

    def step(self, x, labels):
        self.t += 1
        first = torch.where(x[0].flatten()[0] > 5, 0.0, 1.0)
        loss = torch.stack([first, torch.tensor(1.0 - 0.001 * self.t)])
        return -torch.ones_like(x), (loss, loss.clone())


def test_patience_holds_a_stopped_victim_while_the_others_go_on():
    p = ATTACKS.validate(
        "iga-precode",
        {
            "iterations": 20,
            "patience": 3,
            "optimizer": "sgd",
            "lr": 1.0,
            "boxed": False,
            "lr_schedule": "none",
        },
    )
    objective = TwoVictims()
    lo, hi = torch.full((2, 1, 1, 1), -100.0), torch.full((2, 1, 1, 1), 100.0)
    best_x, best_score = optimize_many(p, torch.zeros(2, 1, 1, 1), objective, None, (), lo, hi, False)
    assert objective.t == 21  # victim 1 kept improving: the loop ran its whole budget
    assert float(best_score[0]) == 1.0 and float(best_x[0].flatten()[0]) < 5  # victim 0 was held
    assert float(best_x[1].flatten()[0]) >= 19
    free = ATTACKS.validate("iga-precode", {**p.model_dump(), "patience": 0})
    best_x, best_score = optimize_many(free, torch.zeros(2, 1, 1, 1), TwoVictims(), None, (), lo, hi, False)
    assert float(best_score[0]) == 0.0  # without patience victim 0 walks past 5


def test_mse_normalized_is_the_mse_of_the_models_inputs():
    digits = load_dataset("digits", {"channels": 3, "size": 12})
    a, b = digits.public.x[:4], digits.public.x[4:8]
    expected = ((digits.info.normalize(a) - digits.info.normalize(b)) ** 2).flatten(1).mean(1).double()
    got = mse_normalized(a, b, digits.info.std)
    assert torch.allclose(got, expected, rtol=1e-5)
    assert not torch.allclose(got, mse(a, b), rtol=1e-2)
    recs = [Reconstruction(images=b[i : i + 1].clone()) for i in range(4)]  # one image per victim
    truths = [digits.public.subset([i]) for i in range(4)]
    cell = score_reconstructions(recs, truths, metrics=MetricSection(), std=digits.info.std)
    assert cell.metrics["mse_normalized"] == pytest.approx(float(got.mean()), rel=1e-6)
    assert "mse_normalized" not in score_reconstructions(recs, truths, metrics=MetricSection()).metrics
    with pytest.raises(ValueError, match="channel std"):
        mse_normalized(a, b, (0.2, 0.3))


def test_iga_precode_rebuilds_an_undefended_mlps_image_and_not_a_precode_one():
    # Table 2's claim on a small case: exact-looking reconstructions without a defense, none with the
    # bottleneck. Measured (MLP width 64, 12 px, 2000 steps, images 0–2): undefended SSIM 0.92, 0.96,
    # 1.00; PRECODE 0.03, 0.16, −0.09.
    digits = load_dataset("digits", {"channels": 3, "size": 12})
    attack = create_attack("iga-precode", {"iterations": 2000})
    scores = {}
    for defended in (False, True):
        model = create_model("mlp", {"width": 64}, in_shape=digits.info.shape, num_classes=10, seed=0)
        if defended:
            model = DefensePipeline([create_defense("precode", {})]).model_hook(model, seed=0)
        values = []
        for i in (0, 1):
            data = digits.train.subset([i])
            rec = attack.reconstruct(server_view_of(model, data, digits.info, labels_known=True), seed=0)
            values.append(float(ssim(rec.images, data.x)))
        scores[defended] = values
    assert min(scores[False]) >= 0.85 and max(scores[True]) <= 0.4
    assert not math.isnan(sum(scores[True]))


@pytest.mark.parametrize("name", ["precode-paper.yaml", "precode-cpu.yaml"])
def test_the_paper_protocol_configs_train_and_attack_as_the_paper(name):
    """Clients train with Adam lr 1e-3, batch 64; the attack is iga-precode; MSE also in the paper's space."""
    config = yaml.safe_load((CONFIGS / name).read_text())
    local = config["fl"]["local"]
    assert (local["optimizer"], local["local_lr"], local["batch_size"]) == ("adam", 0.001, 64)
    assert {a["name"] for a in config["attacks"]} == {"iga-precode"}
    assert config["attack"]["rounds"] == [0] and config["attack"]["threat"]["labels_known"]
    assert "mse_normalized" in config["report"]["values"]


def test_the_accuracy_and_training_configs_keep_the_scaled_protocol():
    """configs/precode-accuracy.yaml measures precode-cpu's rows (the same defenses, data and training)
    over three seeds; configs/precode-training.yaml attacks precode-cpu's protocol after 0, 1 and 50
    rounds (= epochs: every client takes part, one local epoch each) and precode-epoch50.yaml after 50
    with 16 victims; GC appears in both readings, every baseline on every local step."""
    cpu, accuracy, training, epoch50 = (yaml.safe_load((CONFIGS / f"precode-{n}.yaml").read_text()) for n in
                                        ("cpu", "accuracy", "training", "epoch50"))  # fmt: skip
    assert accuracy["defenses"] == cpu["defenses"] and accuracy["seeds"] == [0, 1, 2]
    assert accuracy["models"] == cpu["models"] and [m.get("label", m["name"]) for m in cpu["models"]] == [
        "smlp", "dmlp", "lenet-tanh"]  # fmt: skip
    for other in (accuracy, training, epoch50):
        assert (other["fl"], other["dataset"]) == (cpu["fl"], cpu["dataset"])
    assert accuracy["utility"]["rounds"] == 20 and cpu["utility"]["rounds"] == 0  # accuracy: one config
    assert cpu["seeds"] == accuracy["seeds"] == training["seeds"] == epoch50["seeds"] == [0, 1, 2]
    baselines = [d for d in cpu["defenses"] if isinstance(d, dict) and d["name"] != "precode"]
    assert {d["label"]: d.get("ratio") for d in baselines if d["name"] == "pruning"} == {
        "GC": 0.1,
        "GC-keep10": 0.9,
    }
    assert len(baselines) == 4 and all(d["stage"] == "step" for d in baselines)
    assert training["attack"]["rounds"] == [0, 1, 50] and epoch50["attack"]["rounds"] == [50]
    assert "clients_per_round" not in training["fl"] and training["fl"]["local"]["local_epochs"] == 1
    assert training["attacks"] == epoch50["attacks"] == cpu["attacks"]
    assert training["models"] == epoch50["models"] == cpu["models"][1:]  # DMLP and LeNet, as Fig. 8
    assert training["defenses"] == epoch50["defenses"] == ["none", {"name": "precode", "label": "PRECODE"}]
    assert (training["victims"]["count"], epoch50["victims"]["count"]) == (8, 16)
