"""Path choice for many-victim attacks: the decision rules on fake timings and memory (no clocks)."""

import json

import pytest
import torch

from leakshield.attacks.passive.inversion import calibration
from leakshield.attacks.passive.inversion.calibration import (
    CALIBRATION_FILE,
    SMALL_JOB,
    Candidates,
    MemoryBudget,
    choose_path,
)

CPU = torch.device("cpu")


@pytest.fixture(autouse=True)
def _fresh_memo(monkeypatch):
    monkeypatch.setattr(calibration, "_MEMO", {})
    monkeypatch.setattr(calibration, "SMALL_JOB", SMALL_JOB)  # conftest turns calibration off elsewhere


def fake(
    monkeypatch,
    seconds: dict[str, float],
    *,
    compiles: bool = True,
    per_victim: float = 1.0,
    free: float = 1e9,
    in_use: float = 0.0,
):
    """Candidates whose measured seconds per step are ``seconds`` and whose vectorized step takes
    ``per_victim`` bytes per victim of ``free`` bytes; records what was run."""
    calls: list[str] = []
    state = {"compiled": False}

    def timed(run, device, steps=3):
        run(1)
        key = calls[-1]
        return seconds["compiled" if key == "vectorized" and state["compiled"] else key]

    def compile_chunk(chunk):
        calls.append("compile")
        state["compiled"] = compiles
        return compiles

    monkeypatch.setattr(calibration, "_timed", timed)
    monkeypatch.setattr(calibration, "_reset_peak", lambda d: 0.0)
    monkeypatch.setattr(calibration, "_peak", lambda d: per_victim * 4)
    monkeypatch.setattr(calibration, "_device_free", lambda d: free)
    monkeypatch.setattr(calibration, "_in_use", lambda d: in_use)
    return calls, Candidates(
        loop=lambda k: calls.append("loop"),
        vectorized=lambda chunk, k: calls.append("vectorized"),
        compile=compile_chunk,
    )


def test_small_jobs_take_the_vectorized_path_without_measuring(monkeypatch):
    calls, candidates = fake(monkeypatch, {"loop": 1.0, "vectorized": 1.0})
    choice = choose_path({"m": 1}, 4, SMALL_JOB - 1, candidates, CPU)
    assert choice.path == "vectorized" and choice.chunk == 4 and calls == []


@pytest.mark.parametrize(
    ("seconds", "expected"),
    [
        ({"loop": 1.0, "vectorized": 0.1}, "vectorized"),  # per victim·step: 0.1 / 4 victims
        ({"loop": 1.0, "vectorized": 3.8}, "loop"),  # 0.95 per victim: within the margin, the loop stays
        ({"loop": 1.0, "vectorized": 8.0}, "loop"),
    ],
)
def test_the_faster_path_wins_only_by_a_clear_margin(monkeypatch, seconds, expected):
    _, candidates = fake(monkeypatch, seconds)
    choice = choose_path({"m": 2}, 4, 10_000, candidates, CPU, compile_after=1e12)
    assert choice.path == expected
    assert choice.seconds["loop"] == 1.0 and choice.stats()["path"] == expected


def test_compiling_is_tried_only_for_long_jobs_and_kept_only_when_faster(monkeypatch):
    seconds = {"loop": 1.0, "vectorized": 0.4, "compiled": 0.1}
    calls, candidates = fake(monkeypatch, seconds)
    short = choose_path({"m": 3}, 4, 10_000, candidates, CPU, compile_after=1e9)
    assert short.path == "vectorized" and "compile" not in calls
    long = choose_path({"m": 4}, 4, 10_000, candidates, CPU, compile_after=1.0)
    assert long.path == "compiled" and "compile" in calls
    _, failing = fake(monkeypatch, seconds, compiles=False)
    assert choose_path({"m": 5}, 4, 10_000, failing, CPU, compile_after=1.0).path == "vectorized"


def test_decisions_are_remembered_in_the_cache_folder(monkeypatch, tmp_path):
    monkeypatch.setenv("LEAKSHIELD_CACHE_DIR", str(tmp_path))
    calls, candidates = fake(monkeypatch, {"loop": 1.0, "vectorized": 0.1})
    first = choose_path({"m": 6}, 4, 10_000, candidates, CPU, compile_after=1e12)
    stored = json.loads((tmp_path / CALIBRATION_FILE).read_text())
    assert len(stored) == 1 and next(iter(stored.values()))["path"] == "vectorized"
    monkeypatch.setattr(calibration, "_MEMO", {})  # a new process: read from the file
    calls.clear()
    again = choose_path({"m": 6}, 4, 10_000, candidates, CPU, compile_after=1e12)
    assert calls == [] and again.path == first.path and again.remembered


def test_victims_are_chunked_to_fit_memory_and_fall_back_to_the_loop(monkeypatch):
    _, candidates = fake(monkeypatch, {"loop": 1.0, "vectorized": 0.1}, per_victim=100.0, free=1000.0)
    choice = choose_path({"m": 7}, 64, 10_000, candidates, CPU, requested="vectorized")
    assert choice.path == "vectorized" and choice.chunk == 5  # half of 1000 bytes at 100 per victim
    _, tight = fake(monkeypatch, {"loop": 1.0, "vectorized": 0.1}, per_victim=100.0, free=100.0)
    assert choose_path({"m": 8}, 64, 10_000, tight, CPU, requested="vectorized").path == "loop"


def test_an_emulated_memory_limit_sizes_the_chunks(monkeypatch):
    """A smaller card, emulated: half of what is free under the limit, less what the process holds,
    and the bytes per victim the probe does not see (batched L-BFGS's history on the device)."""
    gib = 2**30
    _, roomy = fake(monkeypatch, {"loop": 1.0, "vectorized": 0.1}, per_victim=100.0, free=1e9, compiles=False)
    assert choose_path({"m": 10}, 64, 10_000, roomy, CPU, requested="vectorized").chunk == 64
    limited = MemoryBudget(limit_gib=1000 / gib)
    assert choose_path({"m": 10}, 64, 10_000, roomy, CPU, requested="vectorized", memory=limited).chunk == 5
    history = MemoryBudget(limit_gib=1000 / gib, extra_bytes_per_victim=100.0)
    assert choose_path({"m": 10}, 64, 10_000, roomy, CPU, requested="vectorized", memory=history).chunk == 2
    # measured once per limit: the remembered decision of one limit is not another's
    a = choose_path({"m": 11}, 64, 10_000, roomy, CPU, compile_after=1e12)
    b = choose_path({"m": 11}, 64, 10_000, roomy, CPU, compile_after=1e12, memory=limited)
    assert (a.chunk, b.chunk) == (64, 5)
    # a short job, which is not calibrated, is still sized under a limit
    assert choose_path({"m": 12}, 64, SMALL_JOB - 1, roomy, CPU, memory=limited).chunk == 5
    assert choose_path({"m": 12}, 64, SMALL_JOB - 1, roomy, CPU).chunk == 64
    _, holding = fake(monkeypatch, {"loop": 1.0, "vectorized": 0.1}, per_victim=100.0, free=1e9, in_use=400)
    assert choose_path({"m": 10}, 64, 10_000, holding, CPU, requested="vectorized", memory=limited).chunk == 3


def test_requested_paths_are_honoured(monkeypatch):
    _, candidates = fake(monkeypatch, {"loop": 0.1, "vectorized": 10.0})
    assert choose_path({"m": 9}, 4, 10_000, candidates, CPU, requested="loop").path == "loop"
    assert choose_path({"m": 9}, 4, 10_000, candidates, CPU, requested="vectorized").path == "vectorized"
    assert choose_path({"m": 9}, 4, 10_000, candidates, CPU, requested="compiled").path == "compiled"


def test_a_real_calibration_runs_for_an_attack_subclass_with_its_own_constructor(monkeypatch, digits3):
    """The engine's timers on a real model (which path wins is the clock's business; that the
    calibration runs, is recorded and leaves the results sane is not)."""
    from leakshield.attacks import create_attack
    from leakshield.attacks.passive.inversion.engine import GradientInversion
    from leakshield.fl import server_view_of
    from leakshield.models import create_model

    monkeypatch.setattr(calibration, "SMALL_JOB", 50)

    class Pinned(GradientInversion):
        def __init__(self, params, extra: str) -> None:
            super().__init__(params)
            self.extra = extra

    base = create_attack("ig", {"iterations": 60})
    attack = Pinned(base.params, "pinned")
    model = create_model("lenet", in_shape=digits3.info.shape, num_classes=10).eval()
    views = [
        server_view_of(model, digits3.train.subset([i]), digits3.info, labels_known=True) for i in range(3)
    ]
    out = attack.reconstruct_many(views, seeds=[0, 1, 2])
    assert len(out) == 3 and all(torch.isfinite(r.images).all() for r in out)
    assert out[0].stats["path"] in ("loop", "vectorized") and out[0].stats["calibration_loop_s"] > 0


def test_decisions_go_to_the_runs_cache_folder_when_one_is_given(monkeypatch, tmp_path):
    """``--cache-dir``: a run's calibrations live beside its artifacts, not in the default folder."""
    default, run_cache = tmp_path / "default", tmp_path / "run-cache"
    monkeypatch.setenv("LEAKSHIELD_CACHE_DIR", str(default))
    _, candidates = fake(monkeypatch, {"loop": 1.0, "vectorized": 0.1})
    choose_path({"m": 7}, 4, 10_000, candidates, CPU, compile_after=1e12, folder=run_cache)
    assert (run_cache / CALIBRATION_FILE).is_file() and not (default / CALIBRATION_FILE).exists()
    from leakshield.experiment.config import parse_config

    config = parse_config({"models": ["lenet"], "attacks": ["ig"]})
    attack = config.create_attack(config.attacks[0], run_cache)
    assert attack.execution.calibration_dir == str(run_cache)


def test_execution_settings_are_not_attack_parameters():
    """path, compile_after and victim_shards change speed, not the method: they stay out of the attack's
    parameters (so out of artifact keys), out of the config fingerprint, and are still validated."""
    from leakshield.attacks import create_attack
    from leakshield.errors import ConfigError
    from leakshield.experiment.config import parse_config

    attack = create_attack("ig", {"iterations": 5, "path": "loop", "victim_shards": 2})
    assert attack.execution.path == "loop" and attack.execution.victim_shards == 2
    assert "path" not in attack.params.model_dump() and "victim_shards" not in attack.params.model_dump()
    base = {"models": ["lenet"], "attacks": [{"name": "ig", "iterations": 5}]}
    plain = parse_config(base)
    tuned = parse_config({**base, "attacks": [{"name": "ig", "iterations": 5, "path": "loop"}],
                          "execution": {"victim_shards": 2, "compile_after": 3}})  # fmt: skip
    assert plain.fingerprint() == tuned.fingerprint()
    assert (
        plain.fingerprint()
        != parse_config({**base, "attacks": [{"name": "ig", "iterations": 6}]}).fingerprint()
    )
    assert tuned.create_attack(tuned.attacks[0]).execution.victim_shards == 2
    assert tuned.create_attack(tuned.attacks[0]).execution.path == "loop"
    with pytest.raises(ConfigError, match="path"):
        parse_config({**base, "attacks": [{"name": "ig", "path": "warp"}]})
