"""Fitted artifacts: content-addressed, hash-checked, reused across runs; `leakshield fit` computes them
ahead of a run, which then does no fitting work; public fits see the public split, client fits one
client's data only."""

from __future__ import annotations

import json

import pytest
import torch

from leakshield.artifacts import Artifact, ArtifactCache, FitKey, data_fingerprint
from leakshield.cli import main
from leakshield.defenses import DEFENSES, ClientContext, Defense
from leakshield.registry import NoParams

from helpers import tiny_config, write_config

FIT_CALLS: list[tuple[str, int]] = []


class PublicMeanShift(Defense):
    """Test defense with a public fit: the public split's mean image, added (× 0.01) to every input."""

    fit_scope = "public"

    def fit(self, data):
        FIT_CALLS.append(("public", len(data.data)))
        return Artifact({"mean": data.data.x.mean(dim=0)}, {"samples": len(data.data)})

    def data_hook(self, x, y, context: ClientContext):
        assert self.artifact is not None, "the runner hands the fitted artifact over"
        return x + 0.01 * self.artifact.tensors["mean"].to(x.device), y


class ClientFingerprint(Defense):
    """Test defense with a client fit: the fingerprint of the one dataset it saw; its data stage checks
    that each client receives the artifact of its own data."""

    fit_scope = "client"

    def fit(self, data):
        FIT_CALLS.append(("client", len(data.data)))
        return Artifact({"count": torch.tensor([len(data.data)])}, {"data": data_fingerprint(data.data)})

    def data_hook(self, x, y, context: ClientContext):
        assert context.artifact is not None
        assert context.artifact.metadata["data"] == data_fingerprint(context.dataset.to("cpu"))
        return x, y


@pytest.fixture
def fitted_defenses():
    DEFENSES.register("test-public-mean", summary="test", params=NoParams)(PublicMeanShift)
    DEFENSES.register("test-client-fingerprint", summary="test", params=NoParams)(ClientFingerprint)
    FIT_CALLS.clear()
    yield
    DEFENSES.unregister("test-public-mean")
    DEFENSES.unregister("test-client-fingerprint")


def test_cache_round_trip_and_corruption_is_detected(tmp_path, capsys):
    cache = ArtifactCache(tmp_path)
    key = FitKey("defense:x", {"a": 1}, "public", "abc", seed=0)
    calls = []

    def fit():
        calls.append(1)
        return Artifact({"w": torch.arange(6.0).view(2, 3)}, {"note": "hello"})

    first = cache.get_or_fit(key, fit)
    again = ArtifactCache(tmp_path).get_or_fit(key, fit)
    assert len(calls) == 1 and torch.equal(first.tensors["w"], again.tensors["w"])
    assert again.metadata == {"note": "hello"} and again.key == key.digest
    other = FitKey("defense:x", {"a": 2}, "public", "abc", seed=0)
    assert other.digest != key.digest  # every parameter is part of the address
    tensors = cache.path(key.digest) / "tensors.safetensors"
    tensors.write_bytes(tensors.read_bytes()[:40])  # truncated
    recomputed = cache.get_or_fit(key, fit)
    assert len(calls) == 2 and torch.equal(recomputed.tensors["w"], first.tensors["w"])
    assert (
        "is corrupt (tensors file does not match its recorded SHA-256); recomputing"
        in capsys.readouterr().err
    )
    (cache.path(key.digest) / "meta.json").write_text("{not json")
    cache.get_or_fit(key, fit)
    assert len(calls) == 3


def test_fit_command_then_run_does_no_fitting_work(tmp_path, fitted_defenses, capsys):
    cfg = tiny_config(
        defenses=["none", "test-public-mean", "test-client-fingerprint"],
        attacks=[{"name": "ig", "iterations": 5}],
    )
    path = write_config(tmp_path / "cfg.yaml", cfg)
    cache = tmp_path / "cache"
    assert main(["fit", str(path), "--cache-dir", str(cache), "--quiet", "--device", "cpu"]) == 0
    assert "3 artifacts: 3 fitted, 0 reused" in capsys.readouterr().out
    public_split = sum(1 for kind, _ in FIT_CALLS if kind == "public")
    client_sizes = sorted(n for kind, n in FIT_CALLS if kind == "client")
    assert public_split == 1 and len(client_sizes) == 2 and sum(client_sizes) < 1797  # one client each
    FIT_CALLS.clear()
    out = tmp_path / "run"
    code = main(["run", str(path), "--out", str(out), "--cache-dir", str(cache), "--quiet", "--no-report"])
    assert code == 0, capsys.readouterr().err
    assert FIT_CALLS == [], "the run reuses the artifacts `leakshield fit` stored"
    used = json.loads((out / "artifacts.json").read_text())["artifacts"]
    assert sorted((u["component"], u["client"]) for u in used) == [
        ("test-client-fingerprint", 0),
        ("test-client-fingerprint", 1),
        ("test-public-mean", None),
    ]
    assert all((cache / u["key"][:2] / u["key"] / "meta.json").is_file() for u in used)
    assert main(["fit", str(path), "--cache-dir", str(cache), "--quiet", "--device", "cpu"]) == 0
    assert "3 artifacts: 0 fitted, 3 reused" in capsys.readouterr().out


def test_fit_command_without_fits_says_so(tmp_path, capsys):
    path = write_config(tmp_path / "cfg.yaml", tiny_config())
    assert main(["fit", str(path), "--cache-dir", str(tmp_path / "c"), "--quiet"]) == 0
    assert "nothing to do" in capsys.readouterr().out
    assert not (tmp_path / "c").exists()
