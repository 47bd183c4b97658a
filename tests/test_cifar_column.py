"""benchmarks/cifar_column.py: the CIFAR-10 rows of PRECODE and DCS², each with the digits run's verdict
beside it and whether the dataset changes it, on stored cells with the papers' own numbers."""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

from test_verdicts import _fake_precode_runs

from leakshield.leaderboard.verdicts import check_row

from helpers import benchmark_script, leaderboard_cell


def _column():
    return benchmark_script("cifar_column"), sys.modules["reproduction_rows"]


def _parsed(lines):
    return [[c.strip() for c in line.strip("|").split("|")] for line in lines]


def _use(monkeypatch, column, rows, stores):
    monkeypatch.setattr(rows, "_records", lambda run: tuple(stores[run.name]))
    monkeypatch.setattr(column, "has_run", lambda run: run.name in stores)


def test_precode_rows_on_cifar_with_the_digits_verdict_beside(monkeypatch):
    column, rows = _column()
    digits = _fake_precode_runs()["precode-cpu"]
    _use(monkeypatch, column, rows, {"precode-cifar": digits, "precode-cpu": digits})
    lines = column.precode_column(Path("runs"))
    assert len(lines) == 3 * 2 + 2 * 4  # Table 1's two SSIM rows per model, Table 2's four per model
    parsed = _parsed(lines)
    assert all(check_row(measured, rule, said) is None for _, _, measured, rule, said in parsed)
    assert all(
        said == "holds" and "digits:" in m and ": the same verdict" in m for _, _, m, _, said in parsed
    )
    # PRECODE leaks on the CIFAR-10 DMLP only: that row fails, and says the dataset changes its verdict
    leaky = [
        dataclasses.replace(c, victims=[{"ssim": [0.8]}] * len(c.victims), metrics={**c.metrics, "ssim": 0.8})
        if (c.model, c.defense) == ("dmlp", "PRECODE")
        else c
        for c in digits
    ]
    _use(monkeypatch, column, rows, {"precode-cifar": leaky, "precode-cpu": digits})
    changed = [p for p in _parsed(column.precode_column(Path("runs"))) if "changes the verdict" in p[2]]
    assert len(changed) == 1 and "PRECODE cuts IGA's SSIM on the DMLP" in changed[0][0]
    assert changed[0][4] == "does not hold" and "digits: 0.010" in changed[0][2]
    _use(monkeypatch, column, rows, {"precode-cifar": digits})  # no digits run: the CIFAR-10 rows alone
    assert not any("digits" in p[2] for p in _parsed(column.precode_column(Path("runs"))))


def _dcs2_run(ig: float, imprint: float, seeds=(0, 1, 2)) -> list:
    """A DCS² run over ``seeds``: the undefended attacks rebuild the sensitive sample (SSIM 0.99), DCS²
    cuts them."""
    spread = [-0.004, -0.002, 0.0, 0.0, 0.002, 0.004] * 2

    def cells(defense, attack, value):
        out = []
        for seed in seeds:
            victims = [value + 0.002 * (seed - 1) + d for d in spread]
            made = leaderboard_cell("attack", defense, attack, model="lenet-tanh", seed=seed, victims=victims)
            out.append(dataclasses.replace(made, victims=[{**v, "sensitive": [True]} for v in made.victims]))
        return out

    run = [leaderboard_cell("baseline", None, model=None, ssim=0.3, ssim_sensitive=0.3)]
    for attack, cut in (("ig", ig), ("imprint", imprint)):
        run += cells("none", attack, 0.99)
        run += [c for label in ("DCS2-eq10", "DCS2-eq10-unboxed") for c in cells(label, attack, cut)]
    return run


def test_dcs2_rows_on_cifar(monkeypatch):
    column, rows = _column()
    digits = {"dcs2-privacy": _dcs2_run(0.5, 0.79)}
    _use(monkeypatch, column, rows, {"dcs2-cifar": _dcs2_run(0.15, 0.79), **digits})
    parsed = _parsed(column.dcs2_column(Path("runs")))
    assert [p[4] for p in parsed] == ["holds"] * 4
    assert all(check_row(m, rule, said) is None for _, _, m, rule, said in parsed)
    ig = [p for p in parsed if p[0].startswith("IG")]
    assert len(ig) == 2 and all("digits: 0.500" in p[2] and "changes the verdict" in p[2] for p in ig)
    imprint = [p for p in parsed if p[0].startswith("The imprint")]
    assert all("the same verdict" in p[2] for p in imprint)
    _use(monkeypatch, column, rows, {"dcs2-cifar": _dcs2_run(0.15, 0.79, seeds=(0,)), **digits})
    one_seed = _parsed(column.dcs2_column(Path("runs")))  # the paper's numbers, but from one model
    assert [p[4] for p in one_seed] == ["inconclusive"] * 4
    assert all("n = 1 (one seed" in p[2] for p in one_seed)


def test_the_cifar_configs_change_only_the_images():
    """configs/precode-cifar.yaml and configs/dcs2-cifar.yaml run their digits configs' models, defenses,
    attacks and training at the same image size; only the images, the victims' pool (one client: nothing
    is trained) and the no-information guess (the other images' mean) differ."""
    import yaml

    from helpers import CONFIGS

    for digits_name, cifar_name in (("precode-cpu", "precode-cifar"), ("dcs2", "dcs2-cifar")):
        digits, cifar = (
            yaml.safe_load((CONFIGS / f"{n}.yaml").read_text()) for n in (digits_name, cifar_name)
        )
        for key in ("models", "attack"):
            assert cifar[key] == digits[key], key
        for key in ("defenses", "attacks"):  # the rows the CIFAR-10 column checks, as the digits run has them
            assert all(entry in digits[key] for entry in cifar[key]), key
        assert cifar["fl"]["local"] == digits["fl"]["local"] and cifar["fl"]["clients"] == 1
        assert cifar["dataset"]["name"] == "npz" and cifar["dataset"]["file"] == "cifar10_victims128.npz"
        assert cifar["dataset"]["size"] == digits["dataset"]["size"]
        assert cifar["metrics"]["no_information"] == "leave-one-out" and cifar["utility"]["rounds"] == 0
    precode, cpu = (
        yaml.safe_load((CONFIGS / f"{n}.yaml").read_text()) for n in ("precode-cifar", "precode-cpu")
    )
    assert (precode["defenses"], precode["attacks"]) == (cpu["defenses"], cpu["attacks"])
    dcs2 = yaml.safe_load((CONFIGS / "dcs2-cifar.yaml").read_text())
    assert {a if isinstance(a, str) else a["name"] for a in dcs2["attacks"]} == {"ig", "imprint"}
