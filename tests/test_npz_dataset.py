"""The ``npz`` dataset (images and labels of one .npz file, read without pickle) and the leave-one-out
no-information baseline that a small fixed set of victims is scored against."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from leakshield.data import load_dataset
from leakshield.errors import ConfigError, DataFileMissingError
from leakshield.experiment.world import leave_batch_out


def _write(path, images, labels, **extra):
    np.savez(path, images=images, labels=labels, **extra)
    return path


def test_the_cifar10_victims_load_through_the_npz_dataset(shared_data, cifar_victims):
    """The 128 CIFAR-10 victims as the project reads them: all 128 across the splits, the same pixels
    and labels as the file, CIFAR-10's class names."""
    data = load_dataset("npz", {"file": "cifar10_victims128.npz", "classes": "cifar10"}, root=shared_data)
    every = torch.cat([data.train.x, data.public.x, data.test.x])
    labels = torch.cat([data.train.y, data.public.y, data.test.y])
    images, truth = cifar_victims
    assert every.shape == (128, 3, 32, 32) and data.info.num_classes == 10
    assert data.info.class_names[0] == "airplane"
    order = lambda x: sorted(range(len(x)), key=lambda i: x[i].flatten().tolist()[:64])  # noqa: E731
    assert torch.equal(every[order(every)], images[order(images)])
    assert torch.equal(labels[order(every)], truth[order(images)])


def test_layouts_and_value_ranges(tmp_path):
    rng = np.random.default_rng(0)
    hwc = rng.integers(0, 256, (12, 8, 8, 3), dtype=np.uint8)
    labels = np.arange(12) % 3
    last = load_dataset("npz", {"file": "a.npz"}, root=_write(tmp_path / "a.npz", hwc, labels).parent)
    chw = _write(tmp_path / "b.npz", hwc.transpose(0, 3, 1, 2).copy(), labels)
    first = load_dataset("npz", {"file": str(chw)})  # an absolute path needs no data root
    floats = load_dataset(
        "npz", {"file": "c.npz"}, root=_write(tmp_path / "c.npz", hwc / 255.0, labels).parent
    )
    for data in (first, floats):
        assert torch.allclose(data.train.x, last.train.x, atol=1e-6)
    assert last.info.shape == (3, 8, 8) and last.info.num_classes == 3
    gray = load_dataset("npz", {"file": "d.npz"}, root=_write(tmp_path / "d.npz", hwc[..., 0], labels).parent)
    assert gray.info.shape == (1, 8, 8)
    assert float(last.train.x.max()) <= 1.0 and float(last.train.x.min()) >= 0.0


@pytest.mark.parametrize(
    ("images", "labels", "params", "message"),
    [
        (np.zeros((4, 8, 8, 3), np.uint8), np.zeros(4, np.int64), {"images_key": "x"}, "no array 'x'"),
        (np.zeros((4, 8, 8, 3), np.uint8), np.zeros(3, np.int64), {}, "expected 4 integers"),
        (np.zeros((4, 8, 8, 3), np.uint8), np.zeros(4, np.float32), {}, "expected 4 integers"),
        (np.full((4, 8, 8, 3), 2.0), np.zeros(4, np.int64), {}, "uint8 or floats in"),
        (np.zeros((4, 8, 8, 5), np.uint8), np.zeros(4, np.int64), {}, "C 1 or 3"),
        (
            np.zeros((4, 8, 8, 3), np.uint8),
            np.full(4, 12),
            {"classes": "cifar10"},
            "label 12; classes are 0..9",
        ),
        (np.zeros((4, 8, 8, 3), np.uint8), np.zeros(4, np.int64), {}, "every label is 0"),
        (np.zeros((0, 8, 8, 3), np.uint8), np.zeros(0, np.int64), {}, "no images"),
    ],
)
def test_one_line_errors(tmp_path, images, labels, params, message):
    _write(tmp_path / "v.npz", images, labels)
    with pytest.raises(DataFileMissingError, match=message):
        load_dataset("npz", {"file": "v.npz", **params}, root=tmp_path)


def test_refusals_name_the_field(tmp_path):
    with pytest.raises(DataFileMissingError, match="no data root"):
        load_dataset("npz", {"file": "v.npz"})
    with pytest.raises(DataFileMissingError, match="does not exist"):
        load_dataset("npz", {"file": "missing.npz"}, root=tmp_path)
    with pytest.raises(ConfigError, match="classes"):
        load_dataset("npz", {"file": "v.npz", "classes": "mnist"}, root=tmp_path)


def test_a_single_array_file_is_named(tmp_path):
    np.save(tmp_path / "v.npy", np.zeros((4, 8, 8), np.uint8))
    (tmp_path / "v.npy").rename(tmp_path / "v.npz")
    with pytest.raises(DataFileMissingError, match=r"v\.npz: a single array"):
        load_dataset("npz", {"file": str(tmp_path / "v.npz")})


def test_a_pickled_array_is_never_loaded(tmp_path):
    """Object arrays need pickle; the loader reads with allow_pickle=False and names the file."""
    images = np.empty(4, dtype=object)
    _write(tmp_path / "v.npz", images, np.zeros(4, np.int64))
    with pytest.raises(DataFileMissingError, match="allow_pickle=False"):
        load_dataset("npz", {"file": "v.npz"}, root=tmp_path)


def test_the_guess_is_the_mean_of_the_images_outside_the_batch():
    gen = torch.Generator().manual_seed(0)
    every = torch.rand(6, 1, 2, 2, generator=gen)
    total = every.double().sum(dim=0, keepdim=True)
    for picked in ([1], [1, 4]):
        guess = leave_batch_out(total, 6, every[picked])
        others = every[[i for i in range(6) if i not in picked]]
        assert torch.allclose(guess[0], others.mean(dim=0), atol=1e-6) and guess.dtype == every.dtype
    assert not torch.allclose(leave_batch_out(total, 6, every[[1]])[0], every.mean(dim=0))


@pytest.mark.parametrize("batch_size", [1, 4])
def test_the_baseline_cell_scores_each_victim_against_the_mean_of_the_others(
    tmp_path, monkeypatch, batch_size
):
    """A run with ``metrics.no_information: leave-one-out`` scores each victim batch against the mean of
    every image of the file outside it (all 30, across the splits), one guess for the whole batch, so
    that matching cannot pair an image with a guess that holds it; the default keeps the public mean."""
    from leakshield.experiment import ExperimentRunner, ResultStore, parse_config, world
    from leakshield.metrics import ssim

    from helpers import tiny_config

    rng = np.random.default_rng(1)
    base = rng.integers(0, 256, (1, 16, 16, 1))
    images = np.clip(base + rng.integers(-40, 40, (30, 16, 16, 1)), 0, 255).astype(np.uint8)
    _write(tmp_path / "v.npz", images, np.arange(30) % 3)
    calls = []

    def spy(total, count, victims):
        calls.append((total.clone(), count, victims.clone()))
        return leave_batch_out(total, count, victims)

    monkeypatch.setattr(world, "leave_batch_out", spy)
    stored = {}
    for guess in ("leave-one-out", "public-mean"):
        config = tiny_config(
            dataset={"name": "npz", "file": "v.npz", "root": str(tmp_path)},
            fl={"clients": 1, "local": {"algorithm": "fedavg", "local_lr": 0.1, "batch_size": 8}},
            victims={"count": 2, "batch_size": batch_size, "seed": 0},
            metrics={"no_information": guess},
            attacks=[{"name": "ig", "iterations": 1}],
            utility={"rounds": 0},
        )
        out = tmp_path / f"{guess}-{batch_size}"
        assert ExperimentRunner(parse_config(config), out, device="cpu", progress=False).run().failed == 0
        (cell,) = [r for r in ResultStore(out / "results.sqlite").records() if r.kind == "baseline"]
        stored[guess] = cell.metrics["ssim"]
    assert len(calls) == 2  # two victim batches, leave-one-out only
    every = torch.from_numpy(images).permute(0, 3, 1, 2).double() / 255.0
    expected = []
    for total, count, victim in calls:
        assert count == 30 and torch.allclose(total, every.sum(dim=0, keepdim=True), atol=1e-9)
        rest = (every.sum(dim=0, keepdim=True) - victim.double().sum(dim=0, keepdim=True)) / (30 - batch_size)
        expected.append(float(ssim(rest.float().expand_as(victim), victim).mean()))
    assert stored["leave-one-out"] == pytest.approx(sum(expected) / 2, abs=1e-4)
    assert stored["public-mean"] != pytest.approx(stored["leave-one-out"], abs=1e-3)
