"""Tiny experiment configs for the runner and CLI tests (seconds, not minutes)."""

from __future__ import annotations

import copy
import signal
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import yaml

#: the project's shipped experiment configs
CONFIGS = Path(__file__).parent.parent / "configs"

TINY: dict[str, Any] = {
    "name": "tiny",
    "seeds": [0],
    "dataset": {"name": "digits", "channels": 1, "size": 16},
    "models": ["lenet"],
    "fl": {"clients": 2, "local": {"algorithm": "fedavg", "local_lr": 0.1, "batch_size": 32}},
    "attack": {"rounds": [0], "update": {"algorithm": "fedsgd"}},
    "victims": {"count": 2, "batch_size": 1, "seed": 0},
    "defenses": ["none"],
    "attacks": [{"name": "ig", "iterations": 20}],
    "utility": {"rounds": 1},
}


def benchmark_script(name: str):
    """A script of ``benchmarks/`` (not a package) loaded as a module, for tests of its functions."""
    import importlib.util

    path = Path(__file__).resolve().parents[1] / "benchmarks" / f"{name}.py"
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def tiny_config(**overrides: Any) -> dict[str, Any]:
    config = copy.deepcopy(TINY)
    config.update(overrides)
    return config


def write_config(path: Path, data: dict[str, Any] | str) -> Path:
    path.write_text(data if isinstance(data, str) else yaml.safe_dump(data))
    return path


def client_context(seed: int = 0, *, data=None, info=None, public=None, batch=None, client_id: int = 0):
    """A client stage's context for unit tests: ``data`` is the client's dataset (default: empty),
    ``info`` the dataset facts (default: a 1×1×1 grey image, 10 classes), the generator seeded."""
    import torch

    from leakshield.data.types import DatasetInfo, ImageSet
    from leakshield.defenses import ClientContext

    if data is None:
        data = ImageSet(torch.zeros(0, 1, 1, 1), torch.zeros(0, dtype=torch.long))
    if info is None:
        info = DatasetInfo("test", (1, 1, 1), 10, (0.0,), (1.0,))
    return ClientContext(
        client_id=client_id,
        round=0,
        dataset=data,
        info=info,
        generator=torch.Generator().manual_seed(seed),
        public=public,
        batch=batch,
    )


@contextmanager
def watchdog(seconds: int = 120) -> Iterator[None]:
    """Fail instead of hanging the suite when the body runs longer than ``seconds`` (a hang detector
    for bodies that take milliseconds; not a speed assertion)."""

    def expired(signum, frame):
        raise AssertionError(f"no answer within {seconds} s: a hang")

    previous = signal.signal(signal.SIGALRM, expired)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


# ------------------------------------------------------------------ small files in the datasets' real formats


def idx_bytes(array) -> bytes:
    """An uncompressed IDX file (MNIST's format) of the uint8 ``array``."""
    import struct

    import numpy as np

    dims = b"".join(struct.pack(">I", d) for d in array.shape)
    header = struct.pack(">BBBB", 0, 0, 0x08, array.ndim) + dims
    return header + np.asarray(array).astype(np.uint8).tobytes()


def cifar_records(n: int, label_bytes: int, rng):
    """``n`` records of CIFAR's binary format (``label_bytes`` label bytes, then 3072 pixels): the bytes,
    the labels and the pixels."""
    import numpy as np

    labels = rng.integers(0, 10, (n, label_bytes))
    pixels = rng.integers(0, 256, (n, 3072))
    return np.concatenate([labels, pixels], axis=1).astype(np.uint8).tobytes(), labels, pixels


def write_jpeg(path: Path, size: tuple[int, int], value: int, grey: bool = False) -> None:
    """A JPEG of ``size`` (w, h) whose brightness grows with ``value`` (noise seeded by it)."""
    import numpy as np
    from PIL import Image

    path.parent.mkdir(parents=True, exist_ok=True)
    w, h = size
    rng = np.random.default_rng(value)
    array = (rng.integers(0, 60, (h, w, 3)) + value * 25).clip(0, 255).astype(np.uint8)
    Image.fromarray(array[..., 0] if grey else array).save(path, quality=95)


def write_svhn(root: Path, n_train: int = 30, n_test: int = 10, extra: int = 0) -> Path:
    """SVHN's .mat files (X 32×32×3×N uint8, y N×1 in 1..10) under ``root``."""
    import numpy as np
    from scipy.io import savemat

    root.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(0)
    for name, n in (("train", n_train), ("test", n_test), ("extra", extra)):
        if n:
            x = rng.integers(0, 256, (32, 32, 3, n), dtype=np.uint8)
            y = (np.arange(n) % 10 + 1).reshape(-1, 1).astype(np.uint8)  # 1..10, 10 is the digit 0
            savemat(root / f"{name}_32x32.mat", {"X": x, "y": y})
    return root


def write_tinyimagenet(
    root: Path, wnids=("n01443537", "n01629819", "n01641577"), per_class: int = 6, val: int = 2
) -> Path:
    """Tiny ImageNet's official layout (wnids.txt, words.txt, train/<wnid>/images, val/) under ``root``."""
    root.mkdir(parents=True, exist_ok=True)
    (root / "wnids.txt").write_text("\n".join(wnids) + "\n")
    (root / "words.txt").write_text(
        "\n".join(f"{w}\tclass {k}, synonym" for k, w in enumerate(wnids)) + "\nn99999999\tother\n"
    )
    lines = []
    for k, wnid in enumerate(wnids):
        for i in range(per_class):
            write_jpeg(root / "train" / wnid / "images" / f"{wnid}_{i}.JPEG", (64, 64), k)
        for i in range(val):
            name = f"val_{k * val + i}.JPEG"
            write_jpeg(root / "val" / "images" / name, (64, 64), k)
            lines.append(f"{name}\t{wnid}\t0\t0\t63\t63")
    (root / "val" / "val_annotations.txt").write_text("\n".join(lines) + "\n")
    return root


def leaderboard_cell(
    kind,
    defense,
    attack=None,
    *,
    round=0,
    seed=None,
    status="ok",
    scale=None,
    victims=None,
    model="m",
    **metrics,
):
    """A stored cell for the leaderboard's and the reproduction rows' tests: ``model`` (default ``m``),
    ``metrics`` as given (None values left out), an error text when it failed; ``victims``: each
    victim's SSIM (one image each; the cell's ``ssim`` is their mean unless given)."""
    from leakshield.experiment.store import CellRecord

    values = {k: v for k, v in metrics.items() if v is not None}
    rows = [{"ssim": [v]} for v in victims] if victims is not None else []
    if victims and "ssim" not in values:
        values["ssim"] = sum(victims) / len(victims)
    if seed is None and kind != "baseline":  # seed 0 by default; a baseline is shared (no seed) unless given
        seed = 0
    key = f"{kind}/{model}/{defense}/{attack}/{round}/{seed}/{scale}"
    return CellRecord(key, kind, model, defense, attack, round, seed, status, values, rows,
                      None if status == "ok" else "boom", None, 1.0, 0.0, scale=scale)  # fmt: skip


def marked_rerun(folder: str, index: int) -> tuple[int, int, int]:
    """A stand-in for a stage-2 rerun in a worker process: leaves ``folder/index`` when it finishes."""
    (Path(folder) / str(index)).touch()
    return (1, 0, 0)
