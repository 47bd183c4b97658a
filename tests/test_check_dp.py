"""The DP settings checker: the three misconfigurations through a real Flower app's files (noise sized to
a sensitivity below the clipping norm, a DP strategy with no noise, a filter named as privacy), a correct
app, experiment configs and cross-device settings; and the ``check-dp`` and ``dp-audit`` commands end to
end (exit status, report, resume)."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest

from leakshield.cli import main
from leakshield.dpaudit.checker import check_cross_device, check_experiment
from leakshield.dpaudit.flower_check import check_flower, check_flower_app

PYPROJECT = """
[project]
name = "{name}"
version = "1.0.0"

[tool.flwr.app.components]
serverapp = "{name}_app:server"
clientapp = "{name}_app:client"

[tool.flwr.app.config]
num-server-rounds = 100
fraction-train = 0.5

[tool.flwr.federations]
default = "local"

[tool.flwr.federations.local.options]
num-supernodes = 20

[tool.leakshield.check-dp]
strategy = "{name}_app:make_strategy"
"""

APP = """
from flwr.app import Context, Message
from flwr.clientapp import ClientApp
from flwr.clientapp.mod import LocalDpMod, fixedclipping_mod
from flwr.serverapp import Grid, ServerApp
from flwr.serverapp.strategy import DifferentialPrivacyServerSideFixedClipping, FedAvg


def percentile_privacy_mod(msg, ctxt, call_next):  # keeps the largest entries: no noise
    return call_next(msg, ctxt)


def make_strategy(context: Context):
    inner = FedAvg(fraction_train=float(context.run_config["fraction-train"]))
    return DifferentialPrivacyServerSideFixedClipping(inner, noise_multiplier={noise}, clipping_norm=1.0,
                                                      num_sampled_clients={sampled})


client = ClientApp(mods=[{mods}])
server = ServerApp()


@server.main()
def main(grid: Grid, context: Context) -> None:
    make_strategy(context).start(grid=grid, initial_arrays=None, num_rounds=1)
"""


def write_app(folder: Path, name: str, *, noise: float, sampled: int, mods: str) -> Path:
    folder.mkdir()
    (folder / "pyproject.toml").write_text(PYPROJECT.format(name=name))
    (folder / f"{name}_app.py").write_text(
        textwrap.dedent(APP.format(noise=noise, sampled=sampled, mods=mods))
    )
    return folder


def test_a_flower_app_with_the_three_misconfigurations_gets_an_error_line_for_each(tmp_path, capsys):
    app = write_app(
        tmp_path / "bad",
        "bad",
        noise=0.0,
        sampled=10,
        mods="LocalDpMod(clipping_norm=1.0, sensitivity=1e-4, epsilon=0.5, delta=1e-5), "
        "percentile_privacy_mod",
    )
    findings = check_flower_app(app)
    errors = {f.where: f for f in findings if f.level == "error"}
    assert set(errors) == {
        "LocalDpMod.sensitivity",
        "DifferentialPrivacyServerSideFixedClipping.noise_multiplier",
        "percentile_privacy_mod",
    }, [f.line() for f in findings]
    assert "1e+04× smaller" in errors["LocalDpMod.sensitivity"].message
    assert all("\n" not in f.line() for f in findings)
    assert main(["check-dp", str(app)]) == 1
    out = capsys.readouterr().out
    assert out.count("\nerror: ") + out.startswith("error: ") == 3 and "3 error(s)" in out


def test_a_correct_flower_app_has_no_error_but_its_per_round_epsilon_is_named(tmp_path, capsys):
    app = write_app(
        tmp_path / "good",
        "good",
        noise=1.0,
        sampled=10,
        mods="LocalDpMod(clipping_norm=1.0, sensitivity=1.0, epsilon=0.5, delta=1e-5)",
    )
    findings = check_flower_app(app)
    assert not [f for f in findings if f.level == "error"], [f.line() for f in findings]
    per_round = [f for f in findings if f.where == "LocalDpMod.epsilon"]
    assert per_round and "over 100 rounds" in per_round[0].message
    assert main(["check-dp", str(app)]) == 0
    capsys.readouterr()


def test_noise_sized_for_more_replies_than_sampled_and_client_side_clipping_without_the_mod():
    from flwr.clientapp.mod import fixedclipping_mod
    from flwr.serverapp.strategy import DifferentialPrivacyClientSideFixedClipping, FedAvg

    strategy = DifferentialPrivacyClientSideFixedClipping(FedAvg(fraction_train=0.25), 1.0, 1.0, 10)
    lines = {f.where: f for f in check_flower(strategy, [], nodes=20) if f.level == "error"}
    assert (
        "DifferentialPrivacyClientSideFixedClipping.num_sampled_clients" in lines
    )  # 5 sampled, sized for 10
    assert "DifferentialPrivacyClientSideFixedClipping" in lines  # no clipping mod on the clients
    fine = check_flower(
        DifferentialPrivacyClientSideFixedClipping(FedAvg(fraction_train=0.5), 1.0, 1.0, 10),
        [fixedclipping_mod],
        nodes=20,
    )
    assert not [f for f in fine if f.level == "error"], [f.line() for f in fine]


def test_names_that_say_privacy_and_flowers_classes_by_inheritance():
    from flwr.clientapp.mod import LocalDpMod
    from flwr.serverapp.strategy import FedAvg

    from leakshield.dpaudit.flower_check import named_as_privacy

    for name in ("DPFedAvg", "FedAvgDP", "MyDPStrategy", "DpStrategy", "ldp_mod", "percentile_privacy_mod",
                 "PercentilePrivacy", "DifferentiallyPrivateAvg"):  # fmt: skip
        assert named_as_privacy(name), name
    for name in ("FedAvg", "adaptiveclipping_mod", "SecAggPlusWorkflow", "update_step", "FedAdp", "Dropout"):
        assert not named_as_privacy(name), name

    class MyLocalDp(LocalDpMod):
        pass

    found = check_flower(None, [MyLocalDp(clipping_norm=1.0, sensitivity=1e-3, epsilon=0.5, delta=1e-5)])
    assert [f.where for f in found if f.level == "error"] == ["LocalDpMod.sensitivity"]

    class DPFedAvg(FedAvg):  # named as DP, adds no noise
        pass

    assert [f.level for f in check_flower(DPFedAvg(), []) if f.where == "DPFedAvg"] == ["error"]


def test_the_sample_count_follows_flowers_rule():
    """Flower samples max(int(n·fraction), min_train_nodes): 10 nodes at 0.1 with the default minimum of
    2 sample 2, so noise sized for 2 is right."""
    from flwr.serverapp.strategy import DifferentialPrivacyServerSideFixedClipping, FedAvg

    right = DifferentialPrivacyServerSideFixedClipping(FedAvg(fraction_train=0.1), 1.0, 1.0, 2)
    assert not [f for f in check_flower(right, [], nodes=10) if f.level == "error"]
    over = DifferentialPrivacyServerSideFixedClipping(FedAvg(fraction_train=0.1), 1.0, 1.0, 3)
    assert [f for f in check_flower(over, [], nodes=10) if f.where.endswith("num_sampled_clients")]
    # the strategy's own fraction, not the run config's, is what Flower samples by
    assert not [f for f in check_flower(right, [], nodes=10, fraction_train=0.05) if f.level == "error"]


def test_an_app_whose_code_fails_is_one_line_and_apps_of_the_same_module_names_are_read_afresh(tmp_path):
    from leakshield.errors import ConfigError

    first = write_app(tmp_path / "one", "same", noise=0.0, sampled=10, mods="")
    second = write_app(tmp_path / "two", "same", noise=1.0, sampled=10, mods="")
    assert any(f.where.endswith("noise_multiplier") for f in check_flower_app(first))
    assert not any(f.where.endswith("noise_multiplier") for f in check_flower_app(second))
    broken = write_app(tmp_path / "three", "broken", noise=1.0, sampled=10, mods="")
    (broken / "broken_app.py").write_text(
        (broken / "broken_app.py").read_text() + "\nraise RuntimeError('boom')\n"
    )
    with pytest.raises(ConfigError, match="RuntimeError: boom"):
        check_flower_app(broken)
    assert main(["check-dp", str(first / "pyproject.toml")]) == 1  # the file names its folder


def test_main_style_server_app_without_the_hook_is_reported_unchecked(tmp_path):
    app = write_app(tmp_path / "plain", "plain", noise=1.0, sampled=10, mods="")
    project = app / "pyproject.toml"
    project.write_text(project.read_text().split("[tool.leakshield")[0])
    findings = check_flower_app(app)
    assert any(f.where == "serverapp" and f.level == "warning" for f in findings)


def test_experiment_config_findings(tmp_path):
    from leakshield.experiment.config import load_config

    config = tmp_path / "c.yaml"
    config.write_text(
        textwrap.dedent("""
        models: [lenet]
        defenses:
          - {name: dp-fedavg, noise_multiplier: 0.0}
          - {stack: [{name: clipping, bound: 1.0}, {name: gaussian-noise, sigma: 0.0}], label: zero-noise}
          - {name: gaussian-noise, sigma: 0.01}
          - stack: [{name: clipping, bound: 1.0}, {name: gaussian-noise, sigma: 0.01}]
          - {name: dp-sgd}
        attacks: [idlg]
    """)
    )
    findings = check_experiment(load_config(config))
    by = {(f.level, f.where.split(".")[0]) for f in findings}
    assert ("error", "defenses[dp-fedavg]") in by
    assert ("warning", "defenses[gaussian-noise]") in by
    assert any("without a clipping bound" in f.message for f in findings)
    assert any("after clipping:" in f.message and f.level == "warning" for f in findings)
    assert any("scale 0" in f.message and f.level == "error" for f in findings)
    assert any("per example" in f.message for f in findings)


def test_cross_device_settings_findings():
    from leakshield.crossdevice.federation import CrossDeviceSettings

    s = CrossDeviceSettings(rounds=300, sample_rate=0.05, dp={"noise_multiplier": 1.0})
    total = next(f for f in check_cross_device(s, 150) if f.where == "unit").message
    run_eps, one = (
        float(x) for x in total.split("ε = ")[1].replace(" for one", "").split(" over 300 rounds, ")
    )
    assert one < run_eps
    flagged = {f.where: f for f in check_cross_device(s, 150, claimed_epsilon=one) if f.level == "error"}
    assert "one round's ε" in flagged["claimed ε"].message
    assert (
        "below the accountant"
        in {f.where: f for f in check_cross_device(s, 150, run_eps / 2)}["claimed ε"].message
    )
    assert not [f for f in check_cross_device(s, 150, run_eps * 1.001) if f.level == "error"]
    none = CrossDeviceSettings(dp={"mode": "none"})
    assert check_cross_device(none, 150, 1.0)[0].level == "error"
    zero = CrossDeviceSettings(dp={"noise_multiplier": 0.0})
    assert check_cross_device(zero, 150)[0].where == "dp.noise_multiplier"
    loose = CrossDeviceSettings(dp={"delta": 1e-2})
    assert any(f.where == "dp.delta" for f in check_cross_device(loose, 150))


def test_dp_audit_command_reports_resumes_and_exits_1_when_refuted(tmp_path, capsys, monkeypatch):
    out = tmp_path / "audit"
    args = [
        "dp-audit",
        "--rounds",
        "8",
        "--sample-rate",
        "0.2",
        "--canaries",
        "64",
        "--resamples",
        "100",
        "--device",
        "cpu",
        "--quiet",
        "--out",
        str(out),
    ]
    assert main([*args, "--noise-multiplier", "3"]) == 0
    text = capsys.readouterr().out
    assert "seed 0: " in text and "lower bound" in text
    page = (out / "audit.html").read_text()
    assert "data:image/png;base64," in page and "accountant ε" in page
    kept = json.loads((out / "seed0.json").read_text())
    assert kept["audit"]["verdict"] in ("consistent", "suspect")  # 32 canaries a side: a loose estimate

    import leakshield.dpaudit.audit as audit

    monkeypatch.setattr(audit, "audit_federation", lambda *a, **k: pytest.fail("a kept seed was rerun"))
    assert main([*args, "--noise-multiplier", "3"]) == 0  # resumed from seed0.json
    capsys.readouterr()
    monkeypatch.undo()
    assert main([*args, "--noise-multiplier", "0", "--claimed-epsilon", "0.5"]) == 1
    assert "refuted" in capsys.readouterr().out


def test_check_dp_command_on_cross_device_options_and_bad_targets(tmp_path, capsys):
    assert main(["check-dp", "--noise-multiplier", "0"]) == 1
    assert "dp.noise_multiplier" in capsys.readouterr().out
    assert main(["check-dp", "--noise-multiplier", "1", "--rounds", "10"]) == 0
    capsys.readouterr()
    assert main(["check-dp", str(tmp_path / "missing")]) != 0
    assert "no such file or folder" in capsys.readouterr().err
    assert main(["check-dp", str(tmp_path), "--claimed-epsilon", "1"]) != 0
    assert "--claimed-epsilon" in capsys.readouterr().err
