"""The client guard stage: a defense may judge the model it received before training on it; a refused
model yields no update, observably. The shipped guard (``row-guard``) must refuse the imprint attack's
model and accept every honest round of a federation; the detection protocol scores it (TPR / FPR)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import yaml

from leakshield.attacks import create_attack
from leakshield.cli import main
from leakshield.data import load_dataset
from leakshield.defenses import DefensePipeline
from leakshield.defenses.guards.row_guard import duplicate_share
from leakshield.experiment.store import ResultStore
from leakshield.fl import HonestClient, LocalTraining, ServerKnowledge, ThreatModel, observe_victim
from leakshield.models import create_model


@pytest.fixture(scope="module")
def digits():
    return load_dataset("digits", {"channels": 1, "size": 16})


def guarded_client(digits, **params) -> HonestClient:
    pipeline = DefensePipeline.from_config([{"name": "row-guard", "params": params}])
    return HonestClient(0, digits.train.subset(list(range(40))), LocalTraining(), pipeline, digits.info)


def test_duplicate_share_counts_near_duplicate_row_pairs():
    rows = torch.randn(8, 64, generator=torch.Generator().manual_seed(0))
    assert duplicate_share(rows, 0.99) == 0.0
    same = rows[:1].repeat(8, 1) * torch.linspace(0.5, 2, 8)[:, None]  # scaled copies: |cos| = 1
    assert duplicate_share(same, 0.99) == 1.0
    half = torch.cat([same[:4], rows[4:]])  # 4 duplicates → 12 of 56 ordered pairs
    assert duplicate_share(half, 0.99) == pytest.approx(12 / 56)
    signs = torch.tensor([1.0, -1.0] * 4)[:, None]
    assert duplicate_share(same * signs, 0.99) == 1.0  # opposite rows separate nothing either


def test_the_guard_refuses_the_imprint_model_and_the_client_stays_silent(digits):
    info = digits.info
    honest = create_model("mlp", {"width": 32}, in_shape=info.shape, num_classes=10, seed=0)
    imprint = create_attack("imprint", {"bins": 16})
    sent = imprint.prepare_model(honest, ServerKnowledge(info, digits.public)).model
    client = guarded_client(digits)
    assert client.fit(sent, 3) is None
    assert client.refusals and client.refusals[0][0] == 3 and "near-duplicates" in client.refusals[0][1]
    assert client.fit(honest, 4) is not None and len(client.refusals) == 1
    observation = observe_victim([sent], digits.train.subset([0]), client, threat=ThreatModel(),
                                 server=imprint, knowledge=ServerKnowledge(info, digits.public))  # fmt: skip
    assert observation.refused and observation.views == []
    unguarded = HonestClient(
        0, digits.train.subset(list(range(40))), LocalTraining(), DefensePipeline(), info
    )
    assert unguarded.fit(sent, 3) is not None  # without the guard the same model is trained on


def write_config(tmp_path: Path, **overrides) -> Path:
    config = {
        "name": "guard", "seeds": [0], "dataset": {"name": "digits", "channels": 1, "size": 16},
        "models": [{"name": "mlp", "width": 32}], "fl": {"clients": 4},
        "victims": {"count": 2, "batch_size": 1}, "attack": {"rounds": [0, 3]},
        "defenses": ["none", {"name": "row-guard", "label": "guard"}],
        "attacks": [{"name": "imprint", "bins": 16}, {"name": "ig", "iterations": 5}],
        "utility": {"rounds": 10},
        "report": {"rows": ["defense", "attack"], "columns": ["metric"], "values": ["ssim", "refused"]},
        **overrides,
    }  # fmt: skip
    path = tmp_path / "guard.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def test_detection_cells_score_the_guard_and_the_report_shows_them(tmp_path):
    """A 10-round federation of 4 clients: the guard accepts every honest global model (40 judged, FPR
    0) and refuses the imprint model at both attack rounds for every client (8 judged, TPR 1); the
    imprint cell under the guard learns nothing (every victim refused: the no-information guess)."""
    out = tmp_path / "run"
    assert main(["run", str(write_config(tmp_path)), "--out", str(out), "--quiet", "--device", "cpu",
                 "--cache-dir", str(tmp_path / "cache")]) == 0  # fmt: skip
    records = ResultStore(out / "results.sqlite").records()
    assert all(r.status == "ok" for r in records), [r.error for r in records if r.status != "ok"]
    (detection,) = [r for r in records if r.kind == "detection"]
    assert detection.defense == "guard" and detection.round == 10
    assert detection.metrics["tpr"] == 1.0 and detection.metrics["models_malicious"] == 8
    assert detection.metrics["fpr"] == 0.0 and detection.metrics["models_honest"] == 40
    cells = {(r.defense, r.attack, r.round): r for r in records if r.kind == "attack"}
    baseline = next(r for r in records if r.kind == "baseline").metrics["ssim"]
    for round_ in (0, 3):
        guarded = cells[("guard", "imprint", round_)]
        assert guarded.metrics["refused"] == 1.0
        assert guarded.metrics["ssim"] == pytest.approx(baseline)
        assert cells[("none", "imprint", round_)].metrics["ssim"] > 0.9  # unguarded, imprint recovers
        assert cells[("guard", "ig", round_)].metrics["refused"] == 0.0  # honest models pass
        assert "refused" not in cells[("none", "ig", round_)].metrics  # no guard, nothing to refuse
    table = (out / "table.md").read_text()
    assert "Client guards: detection of malicious models" in table
    assert "| mlp · guard | 0 | 1.000 | 0.000 | 8 / 40 |" in table
    # per attack: refused every time, so nothing leaks through the guard; without it imprint recovers all
    assert "Client guards against each attack: detection and leakage" in table
    assert "| mlp · guard | imprint | 1.000 | 8 | 1.000 | 0.000 | 1.000 | — |" in table
    assert "Threat models: to whom each attack leaks" in table and "G (Data-Enhanced Manipulator)" in table
    html = (out / "report.html").read_text()
    assert "TPR (malicious models refused)" in html


def test_a_run_without_model_modifying_attacks_has_no_true_positive_rate(tmp_path):
    out = tmp_path / "run"
    path = write_config(tmp_path, attacks=[{"name": "ig", "iterations": 3}], utility={"rounds": 2},
                        defenses=[{"name": "row-guard"}])  # fmt: skip
    assert main(["run", str(path), "--out", str(out), "--quiet", "--device", "cpu", "--no-report",
                 "--cache-dir", str(tmp_path / "cache")]) == 0  # fmt: skip
    (detection,) = [r for r in ResultStore(out / "results.sqlite").records() if r.kind == "detection"]
    assert detection.metrics["tpr"] is None  # NaN: nothing malicious was judged (stored as null)
    assert detection.metrics["fpr"] == 0.0
