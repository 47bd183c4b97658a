"""Victims in chunks under an emulated memory limit (``memory_limit_gib``, a smaller card planned on
this one): the chunks are as many as the limit allows, and each victim's result equals the one of a
single chunk, for Adam (IG) and for batched L-BFGS (iDLG)."""

import pytest
import torch

from leakshield.attacks import create_attack
from leakshield.attacks.passive.inversion import calibration
from leakshield.data import load_dataset
from leakshield.fl import server_view_of
from leakshield.models import create_model

MIB = 2**20


@pytest.fixture(scope="module")
def views():
    data = load_dataset("digits", {"channels": 1, "size": 16})
    torch.manual_seed(0)
    model = create_model("lenet", in_shape=data.info.shape, num_classes=10).eval()
    return [server_view_of(model, data.train.subset([i]), data.info, labels_known=True) for i in range(5)]


@pytest.fixture
def one_mib_per_victim(monkeypatch):
    """A step that measures 1 MiB per victim and a process that holds nothing (no clock, no RSS)."""
    monkeypatch.setattr(calibration, "_MEMO", {})
    monkeypatch.setattr(calibration, "_reset_peak", lambda device: 0.0)
    monkeypatch.setattr(calibration, "_peak", lambda device: 4.0 * MIB)  # the 4-victim probe
    monkeypatch.setattr(calibration, "_in_use", lambda device: 0.0)


@pytest.mark.parametrize(
    ("name", "params"),
    [("ig", {"iterations": 8}), ("idlg", {"iterations": 2, "lbfgs_max_iter": 5, "labels": "known"})],
)
def test_chunks_under_an_emulated_limit_give_the_results_of_one_chunk(
    views, one_mib_per_victim, name, params
):
    seeds = list(range(len(views)))
    whole = create_attack(name, {**params, "path": "vectorized"}).reconstruct_many(views, seeds=seeds)
    # 4 MiB, half of it for victims: 2 per chunk, so chunks of 2, 2 and 1 (iDLG's history is extra: 1)
    limited = {**params, "path": "vectorized", "memory_limit_gib": 4 * MIB / 2**30}
    chunked = create_attack(name, limited).reconstruct_many(views, seeds=seeds)
    assert whole[0].stats["chunk"] == len(views)
    assert chunked[0].stats["chunk"] == (2 if name == "ig" else 1)
    # measured: IG identical images, distances within 2e-6 relative; iDLG, whose line search amplifies
    # the float rounding of another batch size, 2.5e-5 and 2.1e-5: bounds 20× that
    bound = 1e-5 if name == "ig" else 5e-4
    for a, b in zip(whole, chunked, strict=True):
        assert torch.allclose(a.images, b.images, atol=bound)
        assert b.stats["grad_distance"] == pytest.approx(a.stats["grad_distance"], rel=bound)


def test_a_limit_below_one_victim_runs_them_one_by_one(views, one_mib_per_victim):
    tiny = {"iterations": 2, "path": "vectorized", "memory_limit_gib": 1 * MIB / 2**30}
    out = create_attack("ig", tiny).reconstruct_many(views[:2], seeds=[0, 1])
    assert [r.stats["path"] for r in out] == ["loop", "loop"]


def test_lbfgs_bookkeeping_counts_against_the_device_only_where_it_is_kept():
    """``device`` (the default) keeps batched L-BFGS's state beside the evaluations, and its bytes count
    in the chunk; ``host`` keeps it on the CPU, and a GPU's chunk does not count it."""
    from types import SimpleNamespace

    from leakshield.attacks.execution import Execution
    from leakshield.attacks.passive.inversion.many import _bookkeeping_bytes, _bookkeeping_host
    from leakshield.attacks.passive.inversion.params import GradientInversionParams
    from leakshield.data import DatasetInfo

    def problem(setting: str | None, device: str = "cpu"):
        execution = Execution() if setting is None else Execution(lbfgs_bookkeeping=setting)
        attack = SimpleNamespace(params=GradientInversionParams(), execution=execution)
        info = DatasetInfo(name="x", shape=(1, 4, 4), num_classes=10, mean=(0.5,), std=(0.5,))
        return SimpleNamespace(attack=attack, device=torch.device(device), n=2, info=info, joint=False)

    assert _bookkeeping_host(problem(None)) is None
    assert _bookkeeping_host(problem("host")) == torch.device("cpu")
    assert _bookkeeping_bytes(problem("host", "cuda")) == 0.0  # on the CPU, not on the GPU
    # 100 pairs of s and y of 2 × 16 values in float32, and their 100 × 100 inner products twice
    assert _bookkeeping_bytes(problem(None)) >= 4 * (2 * 100 * 32 + 2 * 100**2)
    assert _bookkeeping_bytes(problem("host")) == _bookkeeping_bytes(problem(None))  # a CPU's memory
