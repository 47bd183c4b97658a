"""Matmul precision as a choice: float32 by default, tf32 opt-in, applied to torch's CUDA flags in this
process and in every process that resolves a device (workers), and recorded in each cell."""

import os

import pytest
import torch

from leakshield.cli import main
from leakshield.errors import LeakshieldError
from leakshield.experiment.compute import environment
from leakshield.experiment.world import resolve_device
from leakshield.matmul_precision import ENV, matmul_precision, precision_in_force, set_matmul_precision


@pytest.fixture(autouse=True)
def _restore_flags():
    """torch's flags and the environment variable as they were before the test (they are global)."""
    saved = (os.environ.get(ENV), torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32)
    os.environ.pop(ENV, None)
    yield
    os.environ.pop(ENV, None)
    if saved[0] is not None:
        os.environ[ENV] = saved[0]
    torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = saved[1], saved[2]


def test_float32_is_the_default_and_turns_tf32_off_in_cudnn_too():
    assert matmul_precision() == "float32"
    torch.backends.cudnn.allow_tf32 = True  # torch's own default for convolutions
    set_matmul_precision("float32")
    assert precision_in_force() == "float32"
    assert not torch.backends.cudnn.allow_tf32 and not torch.backends.cuda.matmul.allow_tf32
    assert environment(torch.device("cpu"))["matmul_precision"] == "float32"


def test_tf32_is_applied_and_recorded_and_the_flags_stay_readable():
    set_matmul_precision("tf32")
    assert torch.backends.cuda.matmul.allow_tf32 and torch.backends.cudnn.allow_tf32
    assert environment(torch.device("cpu"))["matmul_precision"] == "tf32"
    if hasattr(torch.backends.cudnn, "conv"):  # torch ≥ 2.9: the per-operation flags agree
        assert torch.backends.cudnn.conv.fp32_precision == "tf32"
        assert torch.backends.cuda.matmul.fp32_precision == "tf32"


def test_without_a_choice_a_library_user_s_flags_are_left_alone():
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = True  # the user's own code
    resolve_device("cpu")
    assert precision_in_force() == "tf32"


def test_a_worker_process_takes_the_choice_when_it_resolves_its_device():
    set_matmul_precision("float32")
    os.environ[ENV] = "tf32"  # what a worker inherits from its driver
    resolve_device("cpu")
    assert precision_in_force() == "tf32"


def test_torch_s_own_defaults_are_recorded_as_they_are():
    torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = False, True
    assert environment(torch.device("cpu"))["matmul_precision"] == "float32, cudnn tf32"


def test_an_unknown_choice_is_a_one_line_error():
    with pytest.raises(LeakshieldError, match="allowed: float32, tf32"):
        set_matmul_precision("bf16")
    os.environ[ENV] = "half"
    with pytest.raises(LeakshieldError, match=f"{ENV}='half'"):
        matmul_precision()


def test_every_computing_command_takes_the_option(capsys):
    for command in ("run", "fit", "demo", "leaderboard"):
        with pytest.raises(SystemExit):
            main([command, "--help"])
        assert "--matmul-precision {float32,tf32}" in capsys.readouterr().out
