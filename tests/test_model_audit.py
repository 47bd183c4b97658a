"""``leakshield audit`` and ``leakshield.audit``: a user's own network (imported, or defined in a function)
and image folder; the plan leaves out the attacks whose preconditions fail, with the reason; bad input
is one line; a killed audit resumes; the report holds its sections."""

from __future__ import annotations

import sys

import numpy as np
import pytest
import torch
from PIL import Image
from sklearn.datasets import load_digits
from torch import nn

import leakshield
from leakshield.cli import main
from leakshield.errors import ConfigError, LeakshieldError
from leakshield.experiment import ExperimentRunner
from leakshield.experiment.config import parse_config
from leakshield.experiment.stamps import Stamper
from leakshield.leaderboard.budgets import within_budget
from leakshield.membership.config import MembershipConfig, MembershipRow
from leakshield.membership.kept import run_key
from leakshield.model_audit import report as report_module
from leakshield.model_audit.config import parse_audit_config
from leakshield.model_audit.run import make_plan
from leakshield.models import create_model

NETS = '''
from torch import nn


class SmallNet(nn.Module):
    """A fully connected first layer, then ReLU; optionally BatchNorm."""

    def __init__(self, num_classes, in_shape, width=16, batchnorm=False):
        super().__init__()
        c, h, w = in_shape
        norm = [nn.BatchNorm1d(width)] if batchnorm else []
        self.body = nn.Sequential(nn.Flatten(), nn.Linear(c * h * w, width), *norm, nn.ReLU(),
                                  nn.Linear(width, num_classes))

    def forward(self, x):
        return self.body(x)


class ConvNet(nn.Module):
    """A convolution first: nothing fully connected reads the image."""

    def __init__(self, num_classes):
        super().__init__()
        self.conv = nn.Conv2d(1, 4, 3, padding=1)
        self.head = nn.Linear(4 * 16 * 16, num_classes)

    def forward(self, x):
        return self.head(self.conv(x).relu().flatten(1))


def seven_outputs(**kwargs):
    return nn.Sequential(nn.Flatten(), nn.Linear(256, 7))


def broken(**kwargs):
    raise RuntimeError("boom")
'''


@pytest.fixture
def user_package(tmp_path, monkeypatch):
    """A working directory holding the user's module ``user_nets`` (forgotten afterwards)."""
    (tmp_path / "user_nets.py").write_text(NETS)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", list(sys.path))
    yield tmp_path
    sys.modules.pop("user_nets", None)


def write_image_folder(root, per_class=24, size=16):
    """Digits as PNG files in ``root/<class>/``: the user's image folder."""
    digits = load_digits()
    for label in range(10):
        folder = root / f"class{label}"
        folder.mkdir(parents=True)
        for i, image in enumerate(digits.images[digits.target == label][:per_class]):
            pixels = (image / 16 * 255).astype(np.uint8)
            Image.fromarray(pixels).resize((size, size), Image.BILINEAR).save(folder / f"{i}.png")
    return root


def config(**changes):
    data = {
        "name": "t",
        "model": {"import": "user_nets:SmallNet"},
        "data": {"name": "digits", "channels": 1, "size": 16},
        "federation": {"clients": 2, "local": {"algorithm": "fedsgd", "batch_size": 2}},
        "rounds": 2,
        "attack_rounds": [0],
        "seeds": [0, 1],
        "victims": 1,
        "fresh_victims": 2,
        "candidates": ["gaussian-noise"],
        "rungs": 1,
        "threats": ["honest-server", "malicious-server"],
        "leave_out": ["ggl", "ggl-adaptive", "spear", "fedavg-leakage", "learned-inversion", "guide"],
    }
    return parse_audit_config({**data, **changes})


def test_an_imported_model_is_built_like_a_registered_one(user_package):
    net = create_model(
        "import:user_nets:SmallNet", {"width": 5}, in_shape=(1, 16, 16), num_classes=10, seed=3
    )
    again = create_model(
        "import:user_nets:SmallNet", {"width": 5}, in_shape=(1, 16, 16), num_classes=10, seed=3
    )
    assert net.body[1].out_features == 5 and net.body[-1].out_features == 10  # num_classes given to it
    assert all(torch.equal(a, b) for a, b in zip(net.parameters(), again.parameters(), strict=True))
    grid = parse_config(
        {
            "dataset": {"name": "digits"},
            "models": [{"import": "user_nets:SmallNet", "width": 5}],
            "attacks": ["idlg"],
        }
    )
    assert grid.models[0].name == "import:user_nets:SmallNet" and grid.models[0].display == "SmallNet"


def test_editing_the_users_network_stales_the_cells_it_computed(user_package):
    grid = parse_config(
        {"dataset": {"name": "digits"}, "models": [{"import": "user_nets:SmallNet"}], "attacks": ["idlg"]}
    )
    cell = next(c for c in ExperimentRunner(grid, user_package / "run").cells() if c.kind == "attack")
    before = Stamper(grid).stamps(cell)["model"]
    game = MembershipConfig(model={"name": "import:user_nets:SmallNet"}, rows=[MembershipRow(label="none")])
    kept = run_key(game, game.rows[0], 0)
    (user_package / "user_nets.py").write_text(NETS.replace("nn.ReLU()", "nn.Tanh()"))
    assert Stamper(grid).stamps(cell)["model"] != before
    assert run_key(game, game.rows[0], 0) != kept  # a kept membership run of the old network is not reused


@pytest.mark.parametrize(
    ("changes", "expected"),
    [
        ({"model": {"import": "no_such_pkg.nets:Net"}}, "no module 'no_such_pkg'"),
        (
            {"model": {"import": "user_nets:Missing"}},
            "user_nets has no 'Missing'; it defines ConvNet, SmallNet",
        ),
        ({"model": {"import": "user_nets"}}, "expected 'module:name'"),
        (
            {"model": {"import": "user_nets:broken"}},
            "broken(num_classes=10, in_shape=(1, 16, 16)) raised RuntimeError: boom",
        ),
        (
            {"model": {"import": "user_nets:seven_outputs"}},
            "output (1, 7) on one image; the data has 10 classes",
        ),
        ({"budget": 1.5}, "budget: Input should be less than or equal to 1"),
        ({"budget": -0.1}, "budget: Input should be greater than or equal to 0"),
        ({"leave_out": ["igg"]}, "unknown attack 'igg' (did you mean 'ig'?)"),
        ({"membership": {"clients": 100, "records_per_client": 90}}, "membership: 100 clients × 90 records"),
    ],
)
def test_bad_input_is_one_line(user_package, capsys, changes, expected):
    import yaml

    data = {
        "model": {"import": "user_nets:SmallNet"},
        "data": {"name": "digits", "channels": 1, "size": 16},
        "federation": {"clients": 2, "local": {"batch_size": 2}},
        **changes,
    }
    (user_package / "audit.yaml").write_text(yaml.safe_dump(data))
    assert main(["audit", "audit.yaml", "--plan", "--no-estimate"]) == 2
    err = capsys.readouterr().err
    assert expected in err and err.count("\n") == 1, err


def test_the_plan_leaves_out_each_attack_whose_precondition_fails(user_package):
    conv = make_plan(
        config(
            model={"import": "user_nets:ConvNet"}, threats=["honest-server", "malicious-server"], leave_out=[]
        )
    )
    why = {a.name: a.reason for a in conv.attacks}
    assert "no fully connected layer of this model reads the image" in why["analytic"]
    assert why["trap-weights"] and why["spear"] and why["april"]
    assert "no BatchNorm layer" in why["gradinversion"]
    assert "FedSGD" in why["fedavg-leakage"]
    assert why["ig"] is None and why["imprint"] is None and why["noise-aware"] is None  # adaptive: noise rows
    assert not conv.facts.first_linear and conv.facts.first_layer.startswith("Conv2d")
    normed = make_plan(config(model={"import": "user_nets:SmallNet", "batchnorm": True}, leave_out=[]))
    planned = {a.name for a in normed.attacks if a.planned}
    assert {"analytic", "gradinversion", "trap-weights"} <= planned and normed.facts.batchnorm
    assert normed.facts.first_linear and normed.facts.first_layer == "Linear (256 → 16)"
    assert [a.name for a in normed.grid.attacks] == [a.name for a in normed.attacks if a.planned]
    lines = "\n".join(conv.lines())
    assert "left out: analytic:" in lines and "left out: gradinversion: the model has no BatchNorm" in lines
    defended = make_plan(config(defenses=[{"name": "gaussian-noise", "sigma": 0.01}]))
    assert [d.display for d in defended.grid.defenses] == [
        "none",
        "yours",
        "gaussian-noise",
        "gaussian-noise@sigma=1",
    ]


class KilledError(Exception):
    """Stands for the kill: raised by the n-th cell."""


def test_a_users_class_on_an_image_folder_is_audited_and_a_killed_audit_resumes(tmp_path, monkeypatch):
    class FolderNet(nn.Module):  # defined here: not registered, not importable
        def __init__(self, num_classes, in_shape):
            super().__init__()
            self.fc = nn.Linear(in_shape[0] * in_shape[1] * in_shape[2], 32)
            self.out = nn.Linear(32, num_classes)

        def forward(self, x):
            return self.out(self.fc(x.flatten(1)).relu())

    images = write_image_folder(tmp_path / "images")
    settings = {
        "seeds": [0, 1],
        "victims": 1,
        "fresh_victims": 2,
        "rounds": 2,
        "attack_rounds": [0, 1],
        "defenses": [{"name": "gaussian-noise", "sigma": 1e-3}],
        "candidates": ["gaussian-noise"],
        "rungs": 1,
        "threats": ["honest-server", "malicious-server"],
        "leave_out": ["ggl", "ggl-adaptive", "spear", "fedavg-leakage", "learned-inversion", "guide"],
        "membership": {"clients": 4, "records_per_client": 16},
    }
    budgets = []
    monkeypatch.setattr(
        report_module,
        "within_budget",
        lambda rows, costs, points: budgets.append(points) or within_budget(rows, costs, points),
    )
    federation = {"clients": 2, "local": {"algorithm": "fedsgd", "batch_size": 2}}
    out = tmp_path / "audit"
    computed = 0
    original = ExperimentRunner.compute_cell

    def killed_after_six(self, context, cell):
        nonlocal computed
        computed += 1
        if computed > 6:
            raise KilledError
        return original(self, context, cell)

    monkeypatch.setattr(ExperimentRunner, "compute_cell", killed_after_six)
    with pytest.raises(KilledError):
        leakshield.audit(
            FolderNet, train=images, federation=federation, budget=0.05, out=out, progress=False, **settings
        )
    monkeypatch.setattr(ExperimentRunner, "compute_cell", original)
    report = leakshield.audit(
        FolderNet, train=images, federation=federation, budget=0.05, out=out, progress=False, **settings
    )
    assert report.counts["stored"] == 6 and report.counts["failed"] == 0, report.counts
    assert report.counts["reruns"] >= 2  # stage 2: each row's strongest cell on fresh victims
    again = leakshield.audit(
        FolderNet, train=images, federation=federation, budget=0.05, out=out, progress=False, **settings
    )
    assert again.counts["computed"] == 0  # everything stored (grid and stage 2): nothing recomputed
    assert report.counts["membership_computed"] == 4 and again.counts["membership_computed"] == 0
    assert report.config.model.name.startswith("local:")
    honest, malicious = report.finding("honest-but-curious"), report.finding("malicious server")
    assert honest is not None and malicious is not None
    assert honest.own.defense == "yours" and honest.own.stage_two  # its own defenses, on fresh victims
    assert honest.leaks and honest.image is not None  # noise at 1e-3: the analytic attack still inverts
    assert {score.round for _, score in honest.by_round} == {0, 1}
    for r, score in honest.by_round:  # each round's strongest by the leaderboard's rule: leak rate first
        assert score.leak.rate == max(s.leak.rate for s in honest.own.scores if s.round == r)
        assert len({s.attack for s in honest.own.scores if s.round == r}) > 1  # a choice was made
    assert set(budgets) == {5.0}  # the leaderboard's budgets are in accuracy points
    assert {r.row for r in report.membership["server"][0]} == {"none", "yours"}
    page = report.to_html()
    for section in (
        "Summary",
        "honest-but-curious server",
        "malicious server",
        "Within your budget (5",
        "Every row",
        "DP settings check",
        "Attacks and defenses planned and left out",
        "Reproduce",
        "data:image/png;base64",
        "Membership inference",
        "TPR @ 1 % FPR",
        "left out: left out by the config",
    ):
        assert section in page, section
    assert (out / "audit.html").read_text() == page
    assert "gradinversion" in page and "no BatchNorm layer" in page
    assert "warning: defenses[yours]: gaussian-noise (scale 0.001) without a clipping bound" in page


def test_the_pdf_needs_chromium_and_says_so(tmp_path, monkeypatch):
    from leakshield.model_audit import pdf

    monkeypatch.setattr(pdf.shutil, "which", lambda name: None)
    with pytest.raises(LeakshieldError, match="headless Chromium, which is not installed"):
        pdf.html_to_pdf("<p>x</p>", tmp_path / "a.pdf")


def test_a_model_instance_or_a_folder_of_something_else_is_refused(tmp_path):
    with pytest.raises(ConfigError, match="not an instance"):
        leakshield.audit(nn.Linear(2, 2), train=tmp_path, out=tmp_path / "a")
    (tmp_path / "b").mkdir()
    (tmp_path / "b" / "notes.txt").write_text("mine")
    with pytest.raises(LeakshieldError, match=r"holds no audit\.yaml: not an audit's folder"):
        leakshield.audit("lenet", train=tmp_path, out=tmp_path / "b")


def test_arrays_are_written_as_npz_with_their_test_split(tmp_path):
    from leakshield.model_audit.api import data_section
    from leakshield.model_audit.run import load_data

    x = torch.rand(60, 1, 12, 12)
    y = torch.arange(60) % 3
    section = data_section((x, y), (x[:9], y[:9]), tmp_path / "data")
    assert section["name"] == "npz" and section["root"] == str(tmp_path / "data")
    assert section["file"].startswith("train-") and section["test_file"].startswith("test-")
    data = load_data(config(data=section))
    assert len(data.test) == 9 and data.info.num_classes == 3
    assert data_section((x, y), None, tmp_path / "data")["file"] == section["file"]  # same arrays, same file
    other = data_section((x.flip(0), y), None, tmp_path / "data")["file"]
    assert other != section["file"]  # other arrays: another file, so another audit key
    with pytest.raises(ConfigError, match="one class index"):
        data_section((x, y.float() + 0.5), None, tmp_path / "data")
    with pytest.raises(ConfigError, match="names its own test split"):
        data_section(tmp_path / "images", (x, y), tmp_path / "data")
    with pytest.raises(ConfigError, match=r"as an \.npz file too"):
        data_section(tmp_path / "a.npz", (x, y), tmp_path / "data")


def test_an_audit_folder_of_other_settings_is_refused_before_anything_is_written(user_package):
    from leakshield.experiment.rundir import prepare_run_dir
    from leakshield.model_audit.run import GRID, check_resumable

    first = make_plan(config())
    out = user_package / "audit"
    prepare_run_dir(first.grid, out / GRID)
    (out / "audit.yaml").write_text("name: t\n")
    check_resumable(first, out)  # the same settings: resumes
    with pytest.raises(LeakshieldError, match="holds an audit of other settings"):
        check_resumable(make_plan(config(rounds=3)), out)


def test_one_gradient_attacks_and_defenses_the_model_cannot_take_are_left_out(user_package):
    fedavg = {"clients": 2, "local": {"algorithm": "fedavg", "batch_size": 2, "local_epochs": 3}}
    plan = make_plan(config(federation=fedavg, leave_out=[], candidates=["soteria", "gaussian-noise"]))
    why = {a.name: a.reason for a in plan.attacks}
    assert "each update is 3 local steps" in why["analytic"] and "3 local steps" in why["spear"]
    assert why["fedavg-leakage"] is None  # several local steps: what it is built for
    assert plan.left_out == []  # SmallNet has Linear layers: Soteria can defend one
    (user_package / "conv_only.py").write_text(
        "from torch import nn\n\n\ndef make(num_classes):\n"
        "    return nn.Sequential(nn.Conv2d(1, num_classes, 16), nn.Flatten())\n"
    )
    conv = make_plan(config(model={"import": "conv_only:make"}, candidates=["soteria", "gaussian-noise"]))
    assert [label for label, _ in conv.left_out] == ["soteria"]
    assert "no nn.Linear layer" in conv.left_out[0][1]
    assert "soteria" not in [d.display for d in conv.grid.defenses]
    with pytest.raises(ConfigError, match=r"defenses\[0\] \(soteria\): soteria: the model has no nn.Linear"):
        make_plan(config(model={"import": "conv_only:make"}, defenses=["soteria"]))  # its own: refused
    sys.modules.pop("conv_only", None)


def test_a_class_without_a_source_file_is_keyed_by_its_compiled_code():
    from leakshield.models.imported import compiled

    def make(body):
        namespace = {}
        exec(f"class Net:\n    def forward(self, x):\n        return {body}\n", namespace)
        return namespace["Net"]

    assert compiled(make("x + x")) == compiled(make("x + x"))
    assert compiled(make("x + x")) != compiled(make("x - x"))  # the bytecode alone differs
    assert compiled(make("x * 2")) != compiled(make("x * 3"))  # a constant alone differs


def test_factories_that_capture_other_values_are_other_models():
    import functools

    from leakshield.model_audit.api import model_spec
    from leakshield.models.imported import code_hash

    def maker(width):
        return lambda num_classes: nn.Linear(4, width)

    narrow, wide = model_spec(maker(3))["name"], model_spec(maker(5))["name"]
    assert narrow != wide and code_hash(narrow) != code_hash(wide)  # same code, other closure
    half = model_spec(functools.partial(nn.Linear, 4))
    assert half["name"].startswith("local:torch.nn.modules.linear:Linear#")
    assert model_spec(functools.partial(nn.Linear, 5))["name"] != half["name"]


def test_the_audit_stays_out_of_every_cells_code():
    """``leakshield.audit`` is reached from the package root by name: the code every cell is stamped
    with (its closure from the pipeline) must not grow by everything the audit imports, or each edit of
    the report would recompute every stored cell."""
    from leakshield.code_graph import installed_graph
    from leakshield.experiment.stamps import CORE_ROOTS

    closure = installed_graph().closure(list(CORE_ROOTS))
    assert not [m for m in closure if m.startswith(("leakshield.model_audit", "leakshield.leaderboard"))]
    assert "leakshield.models.imported" in closure  # building a user's model is part of every cell


def test_a_class_importable_from_a_module_is_named_by_its_path():
    from leakshield.model_audit.api import model_spec

    assert model_spec(nn.Linear) == {"import": "torch.nn.modules.linear:Linear"}
    assert model_spec("user_nets:SmallNet") == {"import": "user_nets:SmallNet"}
    assert model_spec("lenet") == {"name": "lenet"}

    def factory(num_classes):
        return nn.Linear(4, num_classes)

    assert model_spec(factory)["name"].startswith("local:") and model_spec(factory)["label"] == "factory"


def test_the_membership_game_plays_the_federation_as_it_runs(user_package):
    from leakshield.model_audit.membership_risk import membership_config

    plain = membership_config(config(), 1000)
    assert [r.label for r in plain.rows] == ["none"]  # no defense of its own: no defense is its row
    secure = config(federation={"clients": 2, "secure_aggregation": True, "local": {"batch_size": 2}})
    rows = membership_config(secure, 1000).rows
    assert [(r.label, r.secure_aggregation) for r in rows] == [("none", False), ("yours", True)]
    assert membership_config(config(membership={"run": False}), 1000) is None
