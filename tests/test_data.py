"""Dataset loaders on small files written here in each real format, digits, and partitioning."""

import gzip

import numpy as np
import pytest
import torch
from PIL import Image

from leakshield.data import (
    ByClassPartition,
    DirichletPartition,
    FixedSizePartition,
    IIDPartition,
    list_datasets,
    load_dataset,
    partition_indices,
)
from leakshield.errors import ConfigError, DataFileMissingError

from helpers import cifar_records, idx_bytes


def test_digits_splits_are_disjoint_seeded_and_32x32(digits3):
    s = digits3
    assert s.info.shape == (3, 32, 32) and s.info.num_classes == 10
    assert len(s.train) + len(s.test) + len(s.public) == 1797
    assert len(s.public) == round(0.2 * (len(s.train) + len(s.public)))
    assert float(s.train.x.min()) >= 0.0 and float(s.train.x.max()) <= 1.0
    # disjoint: no image of the public split equals a training image
    flat_train = {tuple(v) for v in s.train.x[:, 0, ::4, ::4].flatten(1).mul(1000).round().tolist()}
    overlap = sum(
        tuple(v) in flat_train for v in s.public.x[:, 0, ::4, ::4].flatten(1).mul(1000).round().tolist()
    )
    assert overlap <= 3  # a few digits are pixel-identical at this resolution
    again = load_dataset("digits", {"channels": 3, "size": 32})
    assert torch.equal(again.train.x, s.train.x) and torch.equal(again.public.y, s.public.y)


def test_digits_grey_and_bilinear_resize_matches_torch():
    grey = load_dataset("digits", {"channels": 1})
    assert grey.info.shape == (1, 32, 32)
    from sklearn.datasets import load_digits

    raw = torch.from_numpy(load_digits().images).float().div(16).unsqueeze(1)
    resized = torch.nn.functional.interpolate(raw, size=(32, 32), mode="bilinear", align_corners=False)
    all_images = torch.cat([grey.train.x, grey.test.x, grey.public.x])
    # every loaded image is one of the resized originals
    first = grey.train.x[0]
    assert min(float((first - r).abs().max()) for r in resized) < 1e-6
    assert len(all_images) == 1797


@pytest.mark.parametrize("name", ["mnist", "fashion-mnist"])
@pytest.mark.parametrize("gz", [True, False])
def test_idx_loaders_read_real_format(tmp_path, name, gz):
    rng = np.random.default_rng(0)
    arrays = {
        "train-images-idx3-ubyte": rng.integers(0, 256, (50, 28, 28)),
        "train-labels-idx1-ubyte": rng.integers(0, 10, 50),
        "t10k-images-idx3-ubyte": rng.integers(0, 256, (20, 28, 28)),
        "t10k-labels-idx1-ubyte": rng.integers(0, 10, 20),
    }
    for fname, arr in arrays.items():
        data = idx_bytes(arr)
        if gz:
            (tmp_path / f"{fname}.gz").write_bytes(gzip.compress(data))
        else:
            (tmp_path / fname).write_bytes(data)
    s = load_dataset(name, {"public_fraction": 0.2}, root=tmp_path)
    assert s.info.shape == (1, 28, 28)
    assert len(s.train) == 40 and len(s.public) == 10 and len(s.test) == 20
    expected = torch.from_numpy(arrays["t10k-images-idx3-ubyte"][3].astype(np.float32) / 255)
    assert torch.allclose(s.test.x[3, 0], expected)
    assert s.test.y.tolist() == arrays["t10k-labels-idx1-ubyte"].tolist()


def test_idx_bad_magic_is_reported(tmp_path):
    for fname in [
        "train-images-idx3-ubyte",
        "train-labels-idx1-ubyte",
        "t10k-images-idx3-ubyte",
        "t10k-labels-idx1-ubyte",
    ]:
        (tmp_path / fname).write_bytes(b"\x12\x34\x56\x78")
    with pytest.raises(DataFileMissingError, match="bad magic"):
        load_dataset("mnist", root=tmp_path)


def test_cifar10_binary(tmp_path):
    rng = np.random.default_rng(1)
    folder = tmp_path / "cifar-10-batches-bin"
    folder.mkdir()
    for i in range(1, 6):
        (folder / f"data_batch_{i}.bin").write_bytes(cifar_records(4, 1, rng)[0])
    data, labels, pixels = cifar_records(5, 1, rng)
    (folder / "test_batch.bin").write_bytes(data)
    s = load_dataset("cifar10", {"public_fraction": 0.25}, root=tmp_path)  # parent folder works too
    assert s.info.shape == (3, 32, 32) and len(s.train) == 15 and len(s.public) == 5
    assert s.test.y.tolist() == labels[:, 0].tolist()
    # channel planes: R is the first 1024 bytes, row-major
    assert float(s.test.x[2, 0, 0, 1]) == pytest.approx(pixels[2, 1] / 255)
    assert float(s.test.x[2, 1, 0, 0]) == pytest.approx(pixels[2, 1024] / 255)
    assert s.info.class_names[1] == "automobile"


def test_cifar100_binary_uses_fine_labels(tmp_path):
    rng = np.random.default_rng(2)
    train, _, _ = cifar_records(10, 2, rng)
    test, labels, _ = cifar_records(4, 2, rng)
    (tmp_path / "train.bin").write_bytes(train)
    (tmp_path / "test.bin").write_bytes(test)
    s = load_dataset("cifar100", root=tmp_path)
    assert s.info.num_classes == 100 and s.test.y.tolist() == labels[:, 1].tolist()


def test_imagefolder_reads_and_resizes(tmp_path):
    rng = np.random.default_rng(3)
    for split, n in (("train", 6), ("test", 2)):
        for cls in ("cat", "dog"):
            (tmp_path / split / cls).mkdir(parents=True)
            for i in range(n):
                Image.fromarray(rng.integers(0, 256, (40, 50, 3), dtype=np.uint8)).save(
                    tmp_path / split / cls / f"{i}.png"
                )
    s = load_dataset("imagefolder", {"size": 16, "public_fraction": 0.25}, root=tmp_path)
    assert s.info.shape == (3, 16, 16) and s.info.class_names == ("cat", "dog")
    assert len(s.test) == 4 and len(s.train) + len(s.public) == 12


@pytest.mark.parametrize(
    "name", ["mnist", "fashion-mnist", "cifar10", "cifar100", "imagefolder", "svhn", "tinyimagenet", "celeba"]
)
def test_missing_files_name_what_is_expected(tmp_path, name):
    with pytest.raises(DataFileMissingError) as err:
        load_dataset(name, root=tmp_path / "nowhere")
    text = str(err.value)
    assert "\n" not in text and name in text and "never downloads" in text


def test_missing_root_for_real_dataset():
    with pytest.raises(DataFileMissingError, match="no data root given"):
        load_dataset("cifar10")


def test_every_registered_dataset_is_listed():
    assert set(list_datasets()) == {
        "digits",
        "mnist",
        "fashion-mnist",
        "cifar10",
        "cifar100",
        "imagefolder",
        "svhn",
        "tinyimagenet",
        "celeba",
        "npz",
    }


def test_partitions_cover_disjointly():
    labels = torch.arange(100) % 10
    for cfg in (IIDPartition(), DirichletPartition(kind="dirichlet", alpha=0.3)):
        parts = partition_indices(labels, 7, cfg, seed=0)
        joined = torch.cat(parts).sort().values
        assert torch.equal(joined, torch.arange(100))
        assert all(
            torch.equal(a, b) for a, b in zip(parts, partition_indices(labels, 7, cfg, 0), strict=True)
        )
    iid = partition_indices(labels, 7, IIDPartition(), seed=0)
    assert max(map(len, iid)) - min(map(len, iid)) <= 1


def test_dirichlet_small_alpha_is_skewed():
    labels = torch.arange(2000) % 10

    def mean_classes(alpha: float) -> float:
        parts = partition_indices(labels, 10, DirichletPartition(kind="dirichlet", alpha=alpha), seed=1)
        return sum(len(labels[p].unique()) for p in parts) / 10

    assert mean_classes(0.05) < mean_classes(100.0)


def test_by_class_and_fixed_partitions():
    labels = torch.arange(40) % 4
    parts = partition_indices(labels, 2, ByClassPartition(kind="by-class", classes=[[0, 1], [2, 3]]), 0)
    assert set(labels[parts[0]].tolist()) == {0, 1} and set(labels[parts[1]].tolist()) == {2, 3}
    fixed = partition_indices(labels, 3, FixedSizePartition(kind="fixed", samples_per_client=5), 0)
    assert [len(p) for p in fixed] == [5, 5, 5]
    with pytest.raises(ConfigError, match="exceeds"):
        partition_indices(labels, 9, FixedSizePartition(kind="fixed", samples_per_client=5), 0)
