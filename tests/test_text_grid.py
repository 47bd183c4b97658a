"""Text grids: tokenized data as FL datasets, the clients' partition, the attacker's known noise, config
validation, and one small grid run end to end through ``leakshield run`` (resumed, reported)."""

from __future__ import annotations

import json
import sqlite3
import sys
from pathlib import Path

import pytest
import torch
import yaml

from leakshield.cli import main
from leakshield.errors import ConfigError
from leakshield.text.dataset import TokenSet, partition_text
from leakshield.text_grid.config import parse_text_config
from leakshield.text_grid.known import known_noise_std, step_sizes

for module in ("transformers", "tokenizers", "rouge_score"):
    pytest.importorskip(module)


def tiny_config(corpus_path: Path, **overrides) -> dict:
    """A grid small enough for the suite: 1-layer width-16 BERT, 300-id vocabulary, 400 training texts."""
    config = {
        "track": "text",
        "name": "tiny-text",
        "corpus": {"path": str(corpus_path), "max_train": 400},
        "tokenizer": {"vocab_size": 300},
        "max_length": 24,
        "models": [{"name": "bert", "width": 16, "layers": 1, "heads": 2}],
        "fl": {"clients": 4, "local": {"algorithm": "fedavg", "local_lr": 0.05, "batch_size": 32}},
        "partition": "by-group",
        "states": ["untrained", "trained"],
        "training": {"rounds": 1},
        "victims": {"count": 2, "batches": [1, 2]},
        "defenses": ["none", {"name": "gaussian-noise", "label": "noise", "sigma": 0.01}],
        "attacks": ["bag-of-words", {"name": "tag", "iterations": 5}],
    }
    config.update(overrides)
    return config


def test_a_token_set_behaves_as_the_clients_expect():
    ids = torch.tensor([[2, 7, 9, 3, 0], [2, 8, 3, 0, 0], [2, 5, 6, 7, 3]])
    data = TokenSet(ids, torch.tensor([0, 1, 1]))
    assert len(data) == 3
    assert data.subset([2, 0]).y.tolist() == [1, 0]
    assert data.lengths.tolist() == [4, 3, 5]
    with pytest.raises(ValueError, match="integers"):
        TokenSet(ids.float(), torch.tensor([0, 1, 1]))
    with pytest.raises(ValueError, match="shapes"):
        TokenSet(ids[0], torch.tensor([0]))


def test_iid_deals_every_text_once_and_evenly():
    groups = tuple(f"movie{i // 5}" for i in range(23))
    parts = partition_text(groups, 4, "iid", seed=3)
    rows = torch.cat(parts).sort().values
    assert rows.tolist() == list(range(23))
    assert max(map(len, parts)) - min(map(len, parts)) <= 1
    assert [p.tolist() for p in partition_text(groups, 4, "iid", seed=3)] == [p.tolist() for p in parts]


def test_by_group_keeps_each_movie_with_one_client():
    groups = tuple(f"movie{i % 7}" for i in range(40))
    parts = partition_text(groups, 3, "by-group", seed=0)
    assert torch.cat(parts).sort().values.tolist() == list(range(40))
    owners = {}
    for client, rows in enumerate(parts):
        for row in rows.tolist():
            assert owners.setdefault(groups[row], client) == client
    assert all(len(p) for p in parts)
    with pytest.raises(ConfigError, match="7 groups for 8 clients"):
        partition_text(groups, 8, "by-group", seed=0)


def test_the_attacker_knows_the_noise_its_defenses_add():
    noise = [{"name": "gaussian-noise", "params": {"sigma": 0.01}}]
    assert known_noise_std(noise, [4], pool=40) == pytest.approx(0.01)
    dp = [{"name": "dp-sgd", "params": {"noise_multiplier": 1.1, "clip": 2.0}}]
    assert known_noise_std(dp, [4], pool=40) == pytest.approx(1.1 * 2.0 / 4)
    both = known_noise_std(noise + dp, [4], pool=40)
    assert both == pytest.approx((0.01**2 + 0.55**2) ** 0.5)
    assert known_noise_std([{"name": "clipping", "params": {}}], [4], pool=40) is None
    # FedAvg: noise on the update shrinks by lr·steps in −Δθ/(lr·steps); per-step noise averages
    assert known_noise_std(noise, [1] * 5, pool=40, lr=0.1) == pytest.approx(0.01 / 0.5)
    uneven = known_noise_std(dp, [3, 1], pool=40, lr=0.1)
    assert uneven == pytest.approx(((2.2 / 3) ** 2 + 2.2**2) ** 0.5 / 2)
    assert step_sizes(4, 3, 2) == [3, 1, 3, 1]


@pytest.mark.parametrize(
    ("defense", "predicted"),
    [
        ({"name": "gaussian-noise", "sigma": 0.01}, 0.01 / (0.1 * 3)),
        ({"name": "gaussian-noise", "sigma": 0.01, "stage": "step"}, 0.01 / 3**0.5),
        # σ·C = 0.01 on the sum of each step's clipped per-sample gradients (C too large to clip)
        (
            {"name": "dp-sgd", "noise_multiplier": 1e-5, "clip": 1e3},
            (0.01**2 / 4 + 0.01**2 / 4 + 0.01**2) ** 0.5 / 3,
        ),
    ],
)
def test_the_known_noise_is_the_noise_on_a_fedavg_estimate(tmp_path, rotten_tomatoes_csv, defense, predicted):
    """Measured: (noised − bare) of the attacker's estimate over three uneven local steps (2, 2, 1)."""
    from leakshield.artifacts import ArtifactCache
    from leakshield.text_grid.world import TextWorld

    update = {"algorithm": "fedavg", "local_lr": 0.1, "batch_size": 2, "shuffle": False}
    raw = tiny_config(
        rotten_tomatoes_csv, update=update, defenses=["none", defense], victims={"batches": [5]}
    )
    world = TextWorld(parse_text_config(raw), torch.device("cpu"), cache=ArtifactCache(tmp_path))
    bare_setting, noise_setting = world.config.defenses
    model = world.fresh_model(world.config.models[0], bare_setting, seed=0)
    victim = world.victims[5][0]
    bare, steps = world.update(model, bare_setting, victim, seed=0)
    noised, _ = world.update(model, noise_setting, victim, seed=0)
    sizes = step_sizes(5, 2, 1)
    assert steps == len(sizes) == 3
    known = known_noise_std(noise_setting.entries, sizes, len(world.clients[victim.client]), lr=0.1)
    assert known == pytest.approx(predicted)
    difference = torch.cat([(noised[name] - bare[name]).flatten() for name in bare])
    assert float(difference.std()) == pytest.approx(predicted, rel=0.05)  # ~10⁴ entries: spread ≲ 1 %


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"defenses": ["none", "mixup"]}, "defenses[1]: mixup transforms images"),
        ({"attacks": ["dlg"]}, "attacks[0]: unknown text attack 'dlg'"),
        ({"attacks": [{"name": "tag", "labels_known": False}]}, "attacks[0].labels_known"),
        ({"partition": "dirichlet"}, "'iid' or 'by-group'"),
        ({"defenses": [{"name": "gaussian-noise", "label": "a|b"}]}, "hold '|' or '='"),
        ({"fl": {"partition": {"kind": "dirichlet"}}}, "fl.partition"),
        ({"models": [{"name": "bert", "width": 30, "heads": 4}]}, "width 30 must be a multiple of heads 4"),
        ({"defenses": ["none", {"name": "gaussian-noise", "label": "none"}]}, "duplicate labels"),
        ({"states": ["trained", "trained"]}, "states"),
        ({"update": {"algorithm": "fedavg", "optimizer": "adam"}}, "use optimizer sgd with momentum 0"),
        ({"fl": {"secure_aggregation": True}}, "fl.secure_aggregation"),
        ({"corpus": {"public_fraction": 0.5, "test_fraction": 0.5}}, "corpus: public_fraction 0.5"),
    ],
)
def test_a_bad_text_config_is_one_line_naming_the_field(tmp_path, change, message):
    with pytest.raises(ConfigError) as caught:
        parse_text_config(tiny_config(tmp_path / "c.csv", **change))
    assert message in str(caught.value)
    assert "\n" not in str(caught.value)


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory, rotten_tomatoes_csv):
    """The tiny grid run once through ``leakshield run`` (its config, run directory, exit code)."""
    root = tmp_path_factory.mktemp("text-grid")
    path = root / "text.yaml"
    path.write_text(yaml.safe_dump(tiny_config(rotten_tomatoes_csv)))
    out = root / "run"
    code = main(["run", str(path), "--out", str(out), "--device", "cpu", "--quiet", "--cache-dir",
                 str(root / "cache")])  # fmt: skip
    return path, out, code, root


def _cells(out: Path) -> dict[str, dict]:
    with sqlite3.connect(out / "results.sqlite") as db:
        rows = db.execute("SELECT key, status, metrics, victims, threat FROM cells").fetchall()
    return {k: {"status": s, "metrics": json.loads(m), "victims": json.loads(v), "threat": json.loads(t)}
            for k, s, m, v, t in rows}  # fmt: skip


def _cell(cells: dict, **where) -> dict:
    found = [
        c for k, c in cells.items() if all(f"{name}={value}|" in k + "|" for name, value in where.items())
    ]
    assert len(found) == 1, where
    return found[0]


def test_a_text_grid_runs_end_to_end_and_stores_every_cell(tiny_run):
    _, out, code, _ = tiny_run
    assert code == 0
    cells = _cells(out)
    assert len(cells) == 2 * 2 * 2 * 2  # states × defenses × attacks × batches
    assert all(c["status"] == "ok" for c in cells.values())
    assert (out / "report.html").is_file() and "bag-of-words" in (out / "report.md").read_text()
    tag = _cell(cells, state="untrained", defense="none", attack="tag", batch=2)
    assert tag["threat"]["adversary"] == "observing-server"
    assert tag["metrics"]["scored"] == 4  # 2 victims × 2 sequences, each paired and scored
    assert {"rouge1", "rouge2", "rougeL", "exact", "token_accuracy", "floor_rouge1"} <= set(tag["metrics"])


def test_the_undefended_bag_of_words_is_exact_and_noise_hides_it(tiny_run):
    cells = _cells(tiny_run[1])
    for state in ("untrained", "trained"):
        for batch in (1, 2):
            bare = _cell(cells, state=state, defense="none", attack="bag-of-words", batch=batch)["metrics"]
            assert bare["bag_recall"] == 1.0 and bare["bag_precision"] == 1.0
            noised = _cell(cells, state=state, defense="noise", attack="bag-of-words", batch=batch)["metrics"]
            assert noised["bag_recall"] < 0.5  # σ 1e-2 drowns a tiny model's embedding rows


def test_the_trained_state_is_trained_by_fl_and_scored(tiny_run, rotten_tomatoes_csv):
    from leakshield.experiment.code_cache import CodeKeyedCache
    from leakshield.text_grid.world import TextWorld

    cells = _cells(tiny_run[1])
    untrained = _cell(cells, state="untrained", defense="none", attack="tag", batch=1)
    trained = _cell(cells, state="trained", defense="none", attack="tag", batch=1)
    assert [v["truth"] for v in untrained["victims"]] == [v["truth"] for v in trained["victims"]]
    world = TextWorld(parse_text_config(tiny_config(rotten_tomatoes_csv)), torch.device("cpu"),
                      cache=CodeKeyedCache(tiny_run[3] / "cache"))  # fmt: skip
    spec, setting = world.config.models[0], world.config.defenses[0]
    before, after = (world.state(spec, setting, state, seed=0) for state in ("untrained", "trained"))
    moved = [
        float((a - b).detach().abs().max())
        for a, b in zip(after.model.parameters(), before.model.parameters(), strict=True)
    ]
    assert min(moved) > 0  # every parameter moved in FL training (the cached model, as the run used it)
    assert trained["metrics"]["accuracy"] == pytest.approx(after.accuracy)
    assert untrained["metrics"]["accuracy"] == pytest.approx(before.accuracy)


def test_the_fingerprint_follows_the_corpus_content_not_its_place(tmp_path, rotten_tomatoes_csv):
    first, moved, other = tmp_path / "a.csv.bz2", tmp_path / "b.csv.bz2", tmp_path / "c.csv.bz2"
    first.write_bytes(rotten_tomatoes_csv.read_bytes())
    moved.write_bytes(first.read_bytes())
    other.write_bytes(first.read_bytes()[:-1])
    prints = [parse_text_config(tiny_config(p)).fingerprint() for p in (first, moved, other)]
    assert prints[0] == prints[1] != prints[2]


def test_a_rerun_computes_nothing_and_report_rebuilds(tiny_run, capsys):
    path, out, _, root = tiny_run
    before = _cells(out)
    assert main(["run", str(path), "--out", str(out), "--device", "cpu", "--quiet", "--cache-dir",
                 str(root / "cache")]) == 0  # fmt: skip
    assert "0 cells computed, 16 already stored" in capsys.readouterr().out
    assert _cells(out).keys() == before.keys()
    assert main(["report", str(out), "--quiet"]) == 0
    assert "report.html" in capsys.readouterr().out


def test_without_the_text_extra_a_text_run_is_one_line_naming_it(tmp_path, monkeypatch, capsys):
    path = tmp_path / "text.yaml"
    path.write_text(yaml.safe_dump(tiny_config(tmp_path / "absent.csv")))
    monkeypatch.setitem(sys.modules, "transformers", None)  # import transformers → ImportError
    assert main(["run", str(path), "--out", str(tmp_path / "run")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "pip install 'leakshield[text]'" in err
    assert not (tmp_path / "run").exists()


def test_a_text_demo_prints_its_config(capsys):
    assert main(["demo", "--text", "--print-config"]) == 0
    config = yaml.safe_load(capsys.readouterr().out)
    parse_text_config(config)  # the packaged demo config is valid
    assert config["track"] == "text"


def test_a_fedavg_update_of_one_step_gives_the_fedsgd_gradient(tmp_path, rotten_tomatoes_csv):
    from leakshield.artifacts import ArtifactCache
    from leakshield.text_grid.world import TextWorld

    fedavg = {"algorithm": "fedavg", "local_lr": 0.1, "batch_size": 8, "shuffle": False}
    configs = [
        parse_text_config(tiny_config(rotten_tomatoes_csv, update=u))
        for u in ({"algorithm": "fedsgd"}, fedavg)
    ]
    worlds = [TextWorld(c, torch.device("cpu"), cache=ArtifactCache(tmp_path)) for c in configs]
    config = worlds[0].config
    model = worlds[0].fresh_model(config.models[0], config.defenses[0], seed=0)
    victim = worlds[0].victims[2][0]
    (sgd, one), (avg, steps) = (w.update(model, config.defenses[0], victim, seed=0) for w in worlds)
    assert one == steps == 1
    for name, gradient in sgd.items():
        torch.testing.assert_close(avg[name], gradient, atol=1e-5, rtol=1e-3)
    assert any(g.abs().sum() > 0 for g in sgd.values())


def test_the_victims_update_goes_through_the_defense_pipeline(tmp_path, rotten_tomatoes_csv):
    from leakshield.artifacts import ArtifactCache
    from leakshield.text_grid.world import TextWorld

    world = TextWorld(parse_text_config(tiny_config(rotten_tomatoes_csv)), torch.device("cpu"),
                      cache=ArtifactCache(tmp_path))  # fmt: skip
    bare_setting, noise_setting = world.config.defenses
    model = world.fresh_model(world.config.models[0], bare_setting, seed=0)
    victim = world.victims[1][0]
    bare, _ = world.update(model, bare_setting, victim, seed=0)
    noised, _ = world.update(model, noise_setting, victim, seed=0)
    difference = torch.cat([(noised[name] - bare[name]).flatten() for name in bare])
    assert 0.0095 < float(difference.std()) < 0.0105  # σ 0.01 on every entry (over 10⁴ entries)


def test_a_client_outside_defended_clients_sends_its_update_bare(tmp_path, rotten_tomatoes_csv):
    from leakshield.artifacts import ArtifactCache
    from leakshield.text_grid.world import TextWorld

    fl = {"clients": 4, "defended_clients": [1], "local": {"algorithm": "fedavg", "batch_size": 32}}
    world = TextWorld(parse_text_config(tiny_config(rotten_tomatoes_csv, fl=fl)), torch.device("cpu"),
                      cache=ArtifactCache(tmp_path))  # fmt: skip
    bare_setting, noise_setting = world.config.defenses
    model = world.fresh_model(world.config.models[0], bare_setting, seed=0)
    undefended, defended = world.victims[1][:2]  # victims of clients 0 and 1
    for victim, changed in ((undefended, False), (defended, True)):
        bare, _ = world.update(model, bare_setting, victim, seed=0)
        noised, _ = world.update(model, noise_setting, victim, seed=0)
        assert any(not torch.equal(noised[k], bare[k]) for k in bare) is changed


@pytest.mark.parametrize(
    "flags", [["--workers", "2"], ["--dry-run"], ["--data-root", "x"], ["--stop-after", "1"]]
)
def test_grid_options_a_text_run_lacks_are_refused_in_one_line(tmp_path, rotten_tomatoes_csv, capsys, flags):
    path = tmp_path / "text.yaml"
    path.write_text(yaml.safe_dump(tiny_config(rotten_tomatoes_csv)))
    assert main(["run", str(path), "--out", str(tmp_path / "run"), *flags]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and flags[0] in err
    assert not (tmp_path / "run").exists()


def test_the_quick_text_demo_runs_end_to_end(tmp_path, rotten_tomatoes_csv, capsys):
    out = tmp_path / "demo"
    assert main(["demo", "--text", "--quick", "--corpus", str(rotten_tomatoes_csv), "--out", str(out),
                 "--device", "cpu", "--quiet"]) == 0  # fmt: skip
    assert "8 cells computed, 0 already stored, 0 failed" in capsys.readouterr().out
    assert (out / "report.html").is_file()


def test_the_report_lists_cells_in_the_configs_order(tiny_run):
    table = [line.split(" | ") for line in (tiny_run[1] / "report.md").read_text().splitlines()
             if line.startswith("| 0 | bert")]  # fmt: skip
    where = [(row[2], row[3], row[4], int(row[5])) for row in table]  # state, defense, attack, batch
    expected = [(state, defense, attack, batch) for defense in ("none", "noise")
                for state in ("untrained", "trained") for attack in ("bag-of-words", "tag")
                for batch in (1, 2)]  # fmt: skip
    assert sorted(where) == sorted(expected)
    states, defenses, attacks = ["untrained", "trained"], ["none", "noise"], ["bag-of-words", "tag"]
    ranks = [(states.index(s), defenses.index(d), attacks.index(a), b) for s, d, a, b in where]
    assert ranks == sorted(ranks)


def test_batch_sizes_sort_by_size_not_by_spelling():
    from leakshield.experiment.store import CellRecord
    from leakshield.text_grid.report import ordered

    fixed = {"kind": "text", "model": "m", "defense": "d", "attack": "a", "round": None, "seed": 0,
             "status": "ok", "metrics": {}, "victims": [], "error": None, "images": None, "seconds": 0.0,
             "finished": 0.0, "environment": {"state": "untrained"}}  # fmt: skip
    records = [CellRecord(key=str(b), scale=f"batch={b} state=untrained", **fixed) for b in (16, 4, 1)]
    assert [r.key for r in ordered(records)] == ["1", "4", "16"]


def test_dager_and_lamp_run_in_a_grid_and_dager_is_exact_at_batch_one(tmp_path, rotten_tomatoes_csv):
    """DAGER on a 2-block BERT of width 32 and reviews of at most 24 tokens (23 distinct states < 31):
    both victims' reviews back exactly; at batch 2 the bound breaks (up to 47 states) and nothing
    false comes back. LAMP runs with its prior fitted on the public split, under its declared threat."""
    config = tiny_config(
        rotten_tomatoes_csv,
        models=[{"name": "bert", "width": 32, "layers": 2, "heads": 2}],
        states=["untrained"],
        defenses=["none"],
        attacks=[
            "dager",
            {"name": "lamp", "iterations": 4, "candidates": 3, "init_candidates": 2, "swap_every": 2,
             "prior_epochs": 1},
        ],
    )  # fmt: skip
    path = tmp_path / "text.yaml"
    path.write_text(yaml.safe_dump(config))
    out = tmp_path / "run"
    code = main(["run", str(path), "--out", str(out), "--device", "cpu", "--quiet", "--cache-dir",
                 str(tmp_path / "cache")])  # fmt: skip
    assert code == 0
    cells = _cells(out)
    one = _cell(cells, attack="dager", batch=1)["metrics"]
    assert one["exact"] == 1.0 and one["token_accuracy"] == 1.0
    for victim in _cell(cells, attack="dager", batch=2)["victims"]:
        assert victim["exact"] == 0.0 and victim["reconstructed"] == ""
    lamp = _cell(cells, attack="lamp", batch=2)
    assert lamp["status"] == "ok" and lamp["metrics"]["scored"] == 4
    assert "public-split" in lamp["threat"]["knowledge"] and "labels" in lamp["threat"]["knowledge"]
