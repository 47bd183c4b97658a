"""The command line: a fast end-to-end test of every command, and every bad-input case → exit 2 with
one clear line on stderr, no traceback, nothing written over an existing run."""

import subprocess
import sys

import pytest
import yaml

from leakshield.cli import main

from helpers import tiny_config, write_config


def run_cli(capsys, *argv):
    try:
        code = main(list(argv))
    except SystemExit as exc:  # argparse's own exits
        code = exc.code
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def assert_one_line_error(code, err, *fragments):
    assert code == 2
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("leakshield: error: ") and "Traceback" not in err
    for fragment in fragments:
        assert fragment in lines[0], lines[0]


# -- every public command, end to end ----------------------------------------------------------------
def test_run_then_report(tmp_path, capsys):
    cfg = write_config(tmp_path / "tiny.yaml", tiny_config())
    code, out, _ = run_cli(
        capsys, "run", str(cfg), "--out", str(tmp_path / "run"), "--quiet", "--device", "cpu"
    )
    assert code == 0 and "3 cells: 3 computed" in out and (tmp_path / "run" / "report.html").is_file()
    code, out, _ = run_cli(capsys, "run", str(cfg), "--out", str(tmp_path / "run"), "--quiet")
    assert code == 0 and "0 computed, 3 already stored" in out
    code, out, _ = run_cli(capsys, "report", str(tmp_path / "run"))
    assert code == 0 and "no-information baseline" in out and "report.html" in out
    code, out, _ = run_cli(capsys, "report", str(tmp_path / "run"), "--quiet")
    assert code == 0 and "no-information baseline" not in out and "report.html" in out


def test_leaderboard_help_names_the_layout_the_cifar_loader_reads(capsys):
    """--data-root's help and example point at CIFAR-10's binary version, the one the loader accepts."""
    code, out, _ = run_cli(capsys, "leaderboard", "--help")
    assert code == 0
    assert "cifar-10-batches-py" not in out and "cifar-10-batches-bin" in out
    assert "data_batch_1.bin" in out


@pytest.mark.parametrize("what", ["datasets", "models", "defenses", "attacks", "metrics"])
def test_list(capsys, what):
    code, out, _ = run_cli(capsys, "list", what)
    expected = {
        "datasets": "digits",
        "models": "resnet18",
        "defenses": "none",
        "attacks": "idlg",
        "metrics": "ssim",
    }[what]
    assert code == 0 and expected in out


def test_list_verbose_shows_parameters(capsys):
    code, out, _ = run_cli(capsys, "list", "attacks", "-v")
    assert code == 0 and "iterations = 24000" in out and "Geiping" in out


def test_demo_quick_end_to_end(tmp_path, capsys):
    code, out, _ = run_cli(capsys, "demo", "--quick", "--out", str(tmp_path / "demo"), "--quiet")
    assert code == 0 and "4 cells: 4 computed" in out
    html = (tmp_path / "demo" / "report.html").read_text()
    assert "<table>" in html and "Reconstructions" in html and "data:image/png;base64" in html


def test_demo_print_config_is_a_valid_config(capsys, tmp_path):
    code, out, _ = run_cli(capsys, "demo", "--print-config")
    assert code == 0
    from leakshield.experiment import parse_config

    assert parse_config(yaml.safe_load(out)).name == "demo"


def test_module_entry_point_and_help():
    result = subprocess.run([sys.executable, "-m", "leakshield", "--help"], capture_output=True, text=True)
    assert result.returncode == 0 and "run" in result.stdout and "demo" in result.stdout
    result = subprocess.run(
        [sys.executable, "-m", "leakshield", "run", "--help"], capture_output=True, text=True
    )
    assert result.returncode == 0 and "--data-root" in result.stdout and "missing cells" in result.stdout


# -- bad input ---------------------------------------------------------------------------------------
def test_unknown_model_name_suggests(tmp_path, capsys):
    cfg = write_config(tmp_path / "c.yaml", tiny_config(models=["lenett"]))
    code, _, err = run_cli(capsys, "run", str(cfg), "--out", str(tmp_path / "r"))
    assert_one_line_error(code, err, "unknown model 'lenett'", "did you mean 'lenet'")
    assert not (tmp_path / "r").exists()


def test_unknown_attack_name_suggests(tmp_path, capsys):
    cfg = write_config(tmp_path / "c.yaml", tiny_config(attacks=["idgl"]))
    code, _, err = run_cli(capsys, "run", str(cfg), "--out", str(tmp_path / "r"))
    assert_one_line_error(code, err, "unknown attack 'idgl'", "did you mean 'idlg'")


def test_unknown_list_category_suggests(capsys):
    code, _, err = run_cli(capsys, "list", "atacks")
    assert_one_line_error(code, err, "did you mean 'attacks'")


def test_unknown_command(capsys):
    code, _, err = run_cli(capsys, "rnu")
    assert_one_line_error(code, err, "invalid choice")


def test_wrong_type(tmp_path, capsys):
    cfg = write_config(tmp_path / "c.yaml", tiny_config(victims={"count": "many"}))
    code, _, err = run_cli(capsys, "run", str(cfg))
    assert_one_line_error(code, err, "victims.count", "valid integer")


def test_negative_rate(tmp_path, capsys):
    cfg = write_config(tmp_path / "c.yaml", tiny_config(fl={"local": {"local_lr": -0.5}}))
    code, _, err = run_cli(capsys, "run", str(cfg))
    assert_one_line_error(code, err, "fl.local.local_lr", "greater than 0")


def test_negative_component_parameter(tmp_path, capsys):
    cfg = write_config(tmp_path / "c.yaml", tiny_config(attacks=[{"name": "ig", "lr": -1}]))
    code, _, err = run_cli(capsys, "run", str(cfg))
    assert_one_line_error(code, err, "attacks[0]", "lr", "greater than 0")


def test_missing_data_files(tmp_path, capsys):
    cfg = write_config(tmp_path / "c.yaml", tiny_config(dataset={"name": "cifar10"}))
    code, _, err = run_cli(
        capsys, "run", str(cfg), "--out", str(tmp_path / "r"), "--data-root", str(tmp_path / "nothing-here")
    )
    assert_one_line_error(code, err, "cifar10: missing files", "data_batch_1.bin", "never downloads")
    assert not (tmp_path / "r").exists()


def test_unreadable_config(tmp_path, capsys):
    code, _, err = run_cli(capsys, "run", str(tmp_path / "absent.yaml"))
    assert_one_line_error(code, err, "cannot read config")
    broken = write_config(tmp_path / "broken.yaml", "models: [lenet\nattacks: {")
    code, _, err = run_cli(capsys, "run", str(broken))
    assert_one_line_error(code, err, "not valid YAML")


def test_existing_run_of_another_config_is_left_alone(tmp_path, capsys):
    out = tmp_path / "run"
    first = write_config(tmp_path / "a.yaml", tiny_config())
    assert run_cli(capsys, "run", str(first), "--out", str(out), "--quiet")[0] == 0
    snapshot = {p: p.read_bytes() for p in out.rglob("*") if p.is_file()}
    other = write_config(tmp_path / "b.yaml", tiny_config(seeds=[3]))
    code, _, err = run_cli(capsys, "run", str(other), "--out", str(out), "--quiet")
    assert_one_line_error(code, err, "holds a run of a different config")
    assert snapshot == {p: p.read_bytes() for p in out.rglob("*") if p.is_file()}


def test_report_of_a_non_run(tmp_path, capsys):
    code, _, err = run_cli(capsys, "report", str(tmp_path))
    assert_one_line_error(code, err, "not a leakshield run directory")


def test_bad_device_and_threads(tmp_path, capsys):
    cfg = write_config(tmp_path / "c.yaml", tiny_config())
    code, _, err = run_cli(capsys, "run", str(cfg), "--device", "tpu", "--out", str(tmp_path / "r"))
    assert_one_line_error(code, err, "--device 'tpu'", "allowed: cpu, cuda")
    code, _, err = run_cli(capsys, "run", str(cfg), "--threads", "-2")
    assert_one_line_error(code, err, "--threads", "at least 1")
    code, _, err = run_cli(capsys, "run", str(cfg), "--threads", "two")
    assert_one_line_error(code, err, "--threads")


def test_list_verbose_and_the_manual_render_one_record(capsys):
    """`list -v` and the manual's component pages print the same summary, threat and parameter
    descriptions (pydantic field descriptions), from one record per component."""
    from leakshield.attacks import ATTACKS
    from leakshield.cli_list import component_doc, markdown_section

    doc = component_doc(ATTACKS.get("ig"))
    description = dict((f, d) for f, _, _, d in doc.parameters)["lr"]
    assert description == "step size"
    code, out, _ = run_cli(capsys, "list", "attacks", "-v")
    assert code == 0
    ig_block = out[out.index("\nig ") :].split("\n")
    assert any(line.strip().startswith("lr = 0.1  [float]  — step size") for line in ig_block)
    page = markdown_section(doc)
    assert doc.summary in page and doc.threat in page and "| `lr` | `float` | `0.1` | step size |" in page
    assert doc.threat in out
