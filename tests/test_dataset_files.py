"""The seeds' datasets from files written here in their real formats: SVHN (.mat via SciPy), Tiny
ImageNet, CelebA and Medical MNIST (real JPEG folders and the real text files), ImageNet-style folders;
shapes, labels, splits, the public split, one-line errors, and a config that runs on each."""

import subprocess
import sys

import numpy as np
import pytest
import torch
import yaml
from scipy.io import savemat

from leakshield.data import load_dataset
from leakshield.errors import DataFileMissingError

from helpers import write_jpeg, write_svhn, write_tinyimagenet

ATTRIBUTES = ["5_o_Clock_Shadow", "Male", "Smiling"]


def write_celeba(root, n=24):
    root.mkdir(parents=True, exist_ok=True)
    identities = [1, 1, 1, 1, 1, 1, 2, 2, 2, 2, 2, 3, 3, 3, 3, 4, 4, 5]
    identities += [6] * (n - len(identities))
    partition, identity, attrs = [], [], [f"{n}", " ".join(ATTRIBUTES)]
    for i in range(n):
        name = f"{i + 1:06d}.jpg"
        write_jpeg(root / "img_align_celeba" / name, (178, 218), i % 7)
        partition.append(f"{name} {2 if i % 4 == 3 else (1 if i % 8 == 5 else 0)}")
        identity.append(f"{name} {identities[i]}")
        bits = [(-1) ** (i % 2), (-1) ** (i // 4 % 2), 1]  # the test split (i % 4 == 3) holds both sexes
        attrs.append(f"{name}  " + " ".join(f"{b:2d}" for b in bits))
    (root / "list_eval_partition.txt").write_text("\n".join(partition) + "\n")
    (root / "identity_CelebA.txt").write_text("\n".join(identity) + "\n")
    (root / "list_attr_celeba.txt").write_text("\n".join(attrs) + "\n")
    return root


def write_class_folders(root, classes, per_class, size=(64, 64), grey=False):
    for k, cls in enumerate(classes):
        for i in range(per_class):
            write_jpeg(root / cls / f"{cls}_{i:03d}.jpeg", size, k, grey=grey)
    return root


def test_svhn_reads_the_mat_files_and_maps_label_10_to_0(tmp_path):
    write_svhn(tmp_path, extra=5)
    data = load_dataset("svhn", {"public_fraction": 0.2}, root=tmp_path)
    assert data.info.shape == (3, 32, 32) and data.info.num_classes == 10
    assert len(data.train) + len(data.public) == 30 and len(data.public) == 6 and len(data.test) == 10
    assert sorted(data.test.y.tolist()) == list(range(10))  # labels 1..10 → 1..9, 0
    more = load_dataset("svhn", {"extra": True, "public_fraction": 0.2}, root=tmp_path)
    assert len(more.train) + len(more.public) == 35


def test_svhn_pixels_keep_their_row_column_channel_and_sample(tmp_path):
    """SVHN stores X as (row, column, channel, sample): red grows down the rows, green across the
    columns, blue encodes the sample; a transposed or channel-mixed reading fails here."""
    write_svhn(tmp_path)
    rows = np.arange(32, dtype=np.uint8).reshape(32, 1, 1) * 8
    cols = np.arange(32, dtype=np.uint8).reshape(1, 32, 1) * 8
    x = np.zeros((32, 32, 3, 5), dtype=np.uint8)
    for i in range(5):
        x[:, :, 0, i] = np.broadcast_to(rows[..., 0], (32, 32))
        x[:, :, 1, i] = np.broadcast_to(cols[..., 0], (32, 32))
        x[:, :, 2, i] = 40 * i
    savemat(tmp_path / "test_32x32.mat", {"X": x, "y": np.array([[1], [2], [3], [4], [10]], dtype=np.uint8)})
    test = load_dataset("svhn", root=tmp_path).test
    assert test.x.shape == (5, 3, 32, 32) and test.y.tolist() == [1, 2, 3, 4, 0]
    expected_rows = torch.arange(32).float().mul(8).div(255).view(32, 1).expand(32, 32)
    for i in range(5):
        assert torch.allclose(test.x[i, 0], expected_rows)  # red: constant along a row, grows down
        assert torch.allclose(test.x[i, 1], expected_rows.T)  # green: grows across the columns
        assert torch.allclose(test.x[i, 2], torch.full((32, 32), 40 * i / 255))


def test_svhn_compressed_and_plain_mat_files_read_alike(tmp_path):
    """The strict level-5 reader (SciPy's crashed on a damaged file) reads MATLAB's compressed
    variables and plain ones alike, and ignores variables of other classes."""
    from leakshield.data.matlab import read_mat_arrays

    rng = np.random.default_rng(0)
    x = rng.integers(0, 256, (32, 32, 3, 7), dtype=np.uint8)
    y = np.arange(1, 8, dtype=np.float64).reshape(-1, 1)
    for compressed in (False, True):
        path = tmp_path / f"c{compressed}.mat"
        savemat(path, {"X": x, "y": y, "note": "text", "cells": np.array([1, "a"], dtype=object)},
                do_compression=compressed)  # fmt: skip
        arrays = read_mat_arrays(path, ("X", "y"))
        assert np.array_equal(arrays["X"], x) and arrays["X"].dtype == np.uint8
        assert np.array_equal(arrays["y"], y)


def test_svhn_missing_or_damaged_files_are_one_line_errors(tmp_path):
    write_svhn(tmp_path)
    (tmp_path / "test_32x32.mat").unlink()
    with pytest.raises(DataFileMissingError, match=r"test_32x32\.mat") as info:
        load_dataset("svhn", root=tmp_path)
    assert "\n" not in str(info.value)
    (tmp_path / "test_32x32.mat").write_bytes(b"not a mat file")
    with pytest.raises(DataFileMissingError, match=r"test_32x32\.mat: not a readable SVHN \.mat file"):
        load_dataset("svhn", root=tmp_path)


def _v73_mat(path):
    """A MATLAB v7.3 file's signature: the 128-byte MAT header (version 0x0200) before an HDF5 body."""
    text = b"MATLAB 7.3 MAT-file, Platform: GLNXA64, HDF5 schema 1.00 .".ljust(116, b" ")
    path.write_bytes(text + bytes(8) + b"\x00\x02IM" + b"\x89HDF\r\n\x1a\n" + bytes(64))


@pytest.mark.parametrize(
    ("damage", "expected"),
    [
        ("v7.3", r"train_32x32\.mat: a MATLAB v7\.3 \(HDF5\) file"),
        ("label-0", r"train_32x32\.mat: label 0 in y; SVHN's labels are 1\.\.10"),
        ("label-nan", r"train_32x32\.mat: label nan in y"),
        ("label-negative", r"train_32x32\.mat: label -3 in y"),
    ],
)
def test_svhn_v73_files_and_labels_outside_1_to_10_are_one_line(tmp_path, damage, expected):
    write_svhn(tmp_path)
    path = tmp_path / "train_32x32.mat"
    if damage == "v7.3":
        _v73_mat(path)
    else:
        x = np.zeros((32, 32, 3, 3), dtype=np.uint8)
        bad = {"label-0": 0.0, "label-nan": np.nan, "label-negative": -3.0}[damage]
        savemat(path, {"X": x, "y": np.array([[1.0], [bad], [10.0]])})
    with pytest.raises(DataFileMissingError, match=expected) as info:
        load_dataset("svhn", root=tmp_path)
    assert "\n" not in str(info.value)


@pytest.mark.parametrize(
    ("dataset", "listing"),
    [
        ("tinyimagenet", "wnids.txt"),
        ("tinyimagenet", "val/val_annotations.txt"),
        ("celeba", "list_eval_partition.txt"),
        ("celeba", "identity_CelebA.txt"),
    ],
)
def test_a_binary_text_listing_is_one_line_naming_it(tmp_path, dataset, listing):
    (write_tinyimagenet if dataset == "tinyimagenet" else write_celeba)(tmp_path)
    (tmp_path / listing).write_bytes(bytes(range(256)) * 4)  # not UTF-8
    with pytest.raises(DataFileMissingError, match=rf"{listing}: not UTF-8 text") as info:
        load_dataset(dataset, root=tmp_path)
    assert "\n" not in str(info.value)


def test_an_empty_wnids_listing_blames_wnids_txt(tmp_path):
    write_tinyimagenet(tmp_path)
    (tmp_path / "wnids.txt").write_text("\n\n")
    with pytest.raises(DataFileMissingError, match=r"wnids\.txt: lists no classes"):
        load_dataset("tinyimagenet", root=tmp_path)


def test_tinyimagenet_official_layout(tmp_path):
    write_tinyimagenet(tmp_path)
    data = load_dataset("tinyimagenet", {"public_fraction": 0.0001}, root=tmp_path)
    assert data.info.shape == (3, 64, 64) and data.info.num_classes == 3
    assert data.info.class_names == ("class 0", "class 1", "class 2")
    assert len(data.train) + len(data.public) == 18 and len(data.test) == 6
    assert data.test.y.tolist() == [0, 0, 1, 1, 2, 2]
    small = load_dataset("tinyimagenet", {"size": 32, "max_per_class": 2}, root=tmp_path)
    assert small.info.shape == (3, 32, 32) and len(small.train) + len(small.public) == 6


def test_tinyimagenet_partial_folder_and_unreadable_image(tmp_path):
    write_tinyimagenet(tmp_path)
    (tmp_path / "val" / "val_annotations.txt").unlink()
    with pytest.raises(DataFileMissingError, match=r"val_annotations\.txt"):
        load_dataset("tinyimagenet", root=tmp_path)
    write_tinyimagenet(tmp_path)
    bad = tmp_path / "train" / "n01443537" / "images" / "n01443537_0.JPEG"
    bad.write_text("this is no JPEG")
    with pytest.raises(DataFileMissingError, match=f"{bad}: not a readable image") as info:
        load_dataset("tinyimagenet", root=tmp_path)
    assert "\n" not in str(info.value)


def test_celeba_identity_labels_are_the_most_frequent_identities(tmp_path):
    write_celeba(tmp_path)
    data = load_dataset("celeba", {"identities": 3, "public_fraction": 0.0001}, root=tmp_path)
    assert data.info.shape == (3, 64, 64) and data.info.num_classes == 3
    assert data.info.class_names == ("identity 1", "identity 6", "identity 2")  # 6 images (tie: by id), 6, 5
    everything = torch.cat([data.train.y, data.public.y, data.test.y])
    assert sorted(set(everything.tolist())) == [0, 1, 2]
    kept = 6 + 6 + 5  # images of the top 3 identities; the validation partition (1) is dropped
    with_val = load_dataset(
        "celeba", {"identities": 3, "validation": "train", "public_fraction": 0.0001}, root=tmp_path
    )
    assert len(everything) < len(with_val.train) + len(with_val.public) + len(with_val.test) == kept


def test_celeba_attribute_labels(tmp_path):
    write_celeba(tmp_path)
    one = load_dataset("celeba", {"labels": "Male", "size": 32}, root=tmp_path)
    assert one.info.num_classes == 2 and one.info.shape == (3, 32, 32)
    two = load_dataset("celeba", {"labels": ["5_o_Clock_Shadow", "Male"]}, root=tmp_path)
    assert two.info.num_classes == 4 and two.info.class_names[3] == "5_o_Clock_Shadow=1,Male=1"
    assert set(torch.cat([two.train.y, two.public.y, two.test.y]).tolist()) == {0, 1, 2, 3}
    with pytest.raises(DataFileMissingError, match="unknown attributes \\['Bald'\\]; allowed: 5_o_Clock"):
        load_dataset("celeba", {"labels": "Bald"}, root=tmp_path)
    (tmp_path / "list_eval_partition.txt").unlink()
    with pytest.raises(DataFileMissingError, match=r"missing list_eval_partition\.txt"):
        load_dataset("celeba", root=tmp_path)


def test_medical_mnist_is_a_grey_64px_image_folder(tmp_path):
    classes = ["AbdomenCT", "BreastMRI", "CXR", "ChestCT", "Hand", "HeadCT"]
    write_class_folders(tmp_path, classes, 4, grey=True)
    data = load_dataset("medical-mnist", root=tmp_path)
    assert data.info.shape == (1, 64, 64) and data.info.num_classes == 6
    assert data.info.class_names == tuple(classes)
    assert len(data.train) + len(data.public) + len(data.test) == 24


def test_imagefolder_imagenet_layout_cap_and_unreadable_file(tmp_path):
    write_class_folders(tmp_path / "train", ["n01", "n02"], 5, size=(40, 30))
    write_class_folders(tmp_path / "val", ["n01", "n02"], 2, size=(40, 30))
    data = load_dataset("imagefolder", {"max_per_class": 3, "public_fraction": 0.0001}, root=tmp_path)
    assert len(data.train) + len(data.public) == 6 and len(data.test) == 4  # val/ is the test split
    (tmp_path / "train" / "n02" / "broken.png").write_bytes(b"\x89PNG broken")
    with pytest.raises(DataFileMissingError, match=r"broken\.png: not a readable image"):
        load_dataset("imagefolder", root=tmp_path)


WRITERS = {
    "svhn": lambda root: write_svhn(root, n_train=40),
    "tinyimagenet": lambda root: write_tinyimagenet(root, per_class=10),
    "celeba": lambda root: write_celeba(root, n=48),
    "medical-mnist": lambda root: write_class_folders(root, ["CXR", "Hand", "HeadCT"], 12, grey=True),
}


@pytest.mark.parametrize("name", sorted(WRITERS))
def test_a_shipped_config_runs_unchanged_on_each_dataset(name, tmp_path):
    """The demo config with only dataset.name and --data-root changed (and the quick demo's budgets)."""
    root = WRITERS[name](tmp_path / "data")
    printed = subprocess.run(
        [sys.executable, "-m", "leakshield", "demo", "--print-config"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    config = yaml.safe_load(printed)
    config["dataset"]["name"] = name
    config.update(name=f"demo-{name}", victims={**config["victims"], "count": 1}, utility={"rounds": 1})
    config["fl"]["clients"] = 2
    config["attacks"] = [{"name": "idlg", "iterations": 2}, {"name": "ig", "iterations": 5}]
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(config))
    run = subprocess.run(
        [sys.executable, "-m", "leakshield", "run", str(path), "--data-root", str(root), "--out",
         str(tmp_path / "run"), "--quiet", "--threads", "1", "--no-report"],
        capture_output=True, text=True,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr[-2000:]
    assert "0 failed" in run.stdout
