"""Which way to run many victims' attacks: measured, not guessed, and remembered.

Candidates: ``loop`` (one victim after another, the one-victim engine), ``vectorized`` (one ``vmap``
step for all victims; batched L-BFGS for L-BFGS) and ``compiled`` (that step compiled with
``torch.compile``; L-BFGS pads its shrinking batches to the compiled size). A calibration times a few
steps of each on the actual model, victims and device, and measures the memory one victim's share of
the vectorized step takes. The faster path wins only by a clear margin (:data:`MARGIN`, so that a near
tie does not flip from run to run), and compiling is tried only when the eager estimate exceeds
``compile_after`` seconds (by default :data:`COMPILE_AFTER` of the device type). Victims are then
attacked in chunks that fit in half the free memory (under an emulated limit, ``memory_limit_gib``, or a
process memory fraction, when set); if not even one fits vectorized, the loop runs.

Decisions are remembered per (model shapes, attack settings, victims, device, threads) for the process
and in ``calibration.json`` in the run's cache folder (``--cache-dir``), so a rerun takes the same path
and gives the same numbers (the paths agree to float rounding only). Short attacks skip calibration: below
:data:`SMALL_JOB` steps per victim the vectorized path is taken without measuring (a step count, not
victims × steps: 1,600 victim·steps take 5 s on LeNet but 80 s on ConvNet-32).
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch

from leakshield import __version__
from leakshield.artifacts import default_cache_dir

MARGIN = 1.15
SMALL_JOB = 50
#: seconds of eager work from which compiling is tried, by device type (a compilation took 10–100 s on
#: 2 CPU cores, 6–13 s on an H200; there the estimate, which counts the objective's steps only, put the
#: demo's iDLG at a few seconds while its L-BFGS ran a minute: docs/speed-and-scale.md)
COMPILE_AFTER = {"cpu": 120.0, "cuda": 5.0}
CALIBRATION_FILE = "calibration.json"
_MEMO: dict[str, PathChoice] = {}


@dataclass(frozen=True)
class PathChoice:
    """The chosen path, the victims per chunk, and what the calibration measured (seconds per
    victim·step of each candidate, bytes per victim of the vectorized step; empty when not measured)."""

    path: str
    chunk: int
    seconds: dict[str, float] = field(default_factory=dict)
    bytes_per_victim: float | None = None
    remembered: bool = False

    def stats(self) -> dict[str, float | str]:
        out: dict[str, float | str] = {"path": self.path, "chunk": float(self.chunk)}
        out.update({f"calibration_{k}_s": v for k, v in self.seconds.items()})
        if self.bytes_per_victim is not None:
            out["calibration_bytes_per_victim"] = self.bytes_per_victim
        return out


@dataclass
class Candidates:
    """Timers the engine hands over: each runs ``steps`` steps and returns nothing; ``compile`` compiles
    the vectorized step for a chunk of the given size (False when it fails)."""

    loop: Callable[[int], None]
    vectorized: Callable[[int, int], None]
    compile: Callable[[int], bool] | None


def signature(parts: dict) -> str:
    return hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()[:24]


def choose_path(
    key: dict,
    victims: int,
    steps: int,
    candidates: Candidates,
    device: torch.device,
    *,
    requested: str = "auto",
    compile_after: float | None = None,
    folder: str | Path | None = None,
    memory: MemoryBudget | None = None,
) -> PathChoice:
    """The path for ``victims`` victims × ``steps`` steps (see the module docstring); the measurement
    is remembered in ``folder`` (the run's cache folder; default: the default cache folder). ``memory``:
    an emulated memory limit and the bytes per victim the step's probe does not see."""
    memory = memory or MemoryBudget()
    if compile_after is None:
        compile_after = COMPILE_AFTER.get(device.type, COMPILE_AFTER["cpu"])
    if requested == "loop" or victims < 2:
        return PathChoice("loop", 1)
    if requested in ("vectorized", "compiled"):
        sized = _sized(candidates, victims, device, memory)
        compiles = requested == "compiled" and sized.path == "vectorized" and candidates.compile is not None
        if compiles and candidates.compile(sized.chunk):
            return PathChoice(**{**asdict(sized), "path": "compiled"})
        return sized
    cap = _process_cap(device)
    if steps < SMALL_JOB:  # not calibrated; sized to memory only on a smaller card
        limited = memory.limit_gib is not None or cap is not None
        return _sized(candidates, victims, device, memory) if limited else PathChoice("vectorized", victims)
    limits = {} if memory == MemoryBudget() else {"memory": asdict(memory)}
    if cap is not None:
        limits["process_cap"] = cap
    memo = signature(
        {
            **key,
            **limits,
            "victims": victims,
            "device": str(device),
            "threads": torch.get_num_threads(),
            "torch": torch.__version__,
            "leakshield": __version__,
        }
    )
    if memo in _MEMO:
        return _with_compile(_MEMO[memo], candidates)
    stored = _load(memo, folder)
    if stored is not None:
        _MEMO[memo] = stored
        return _with_compile(stored, candidates)
    choice = _measure(victims, steps, candidates, device, compile_after, memory)
    _MEMO[memo] = choice
    _save(memo, choice, folder)
    return choice


def _with_compile(choice: PathChoice, candidates: Candidates) -> PathChoice:
    """A remembered 'compiled' choice still has to compile this objective (and may fall back)."""
    remembered = PathChoice(**{**asdict(choice), "remembered": True})
    if choice.path == "compiled" and (candidates.compile is None or not candidates.compile(choice.chunk)):
        return PathChoice(**{**asdict(remembered), "path": "vectorized"})
    return remembered


def _measure(
    victims: int,
    steps: int,
    candidates: Candidates,
    device: torch.device,
    compile_after: float,
    memory: MemoryBudget,
):
    seconds = {"loop": _timed(lambda k: candidates.loop(k), device)}
    chunk, per_victim = _chunk(candidates, victims, device, memory)
    if chunk == 0:
        return PathChoice("loop", 1, seconds, per_victim)
    seconds["vectorized"] = _timed(lambda k: candidates.vectorized(chunk, k), device) / chunk
    best = "vectorized" if seconds["vectorized"] * MARGIN < seconds["loop"] else "loop"
    estimate = seconds[best] * victims * steps
    if candidates.compile is not None and estimate > compile_after and candidates.compile(chunk):
        seconds["compiled"] = _timed(lambda k: candidates.vectorized(chunk, k), device) / chunk
        if seconds["compiled"] * MARGIN < seconds[best]:
            best = "compiled"
    return PathChoice(best, chunk if best != "loop" else 1, seconds, per_victim)


def _timed(run: Callable[[int], None], device: torch.device, steps: int = 3) -> float:
    """Seconds per step: ``1 + steps`` steps minus one step, so that set-up and warm-up cancel."""

    def clock(k: int) -> float:
        _sync(device)
        start = time.perf_counter()
        run(k)
        _sync(device)
        return time.perf_counter() - start

    clock(1)  # warm-up
    return max((clock(1 + steps) - clock(1)) / steps, 1e-9)


@dataclass(frozen=True)
class MemoryBudget:
    """``limit_gib``: attack as if the device had at most this much memory (execution setting
    ``memory_limit_gib``); ``extra_bytes_per_victim``: what each victim holds beside the step that the
    probe measures (batched L-BFGS's curvature pairs on the same device)."""

    limit_gib: float | None = None
    extra_bytes_per_victim: float = 0.0


def _sized(candidates: Candidates, victims: int, device: torch.device, memory: MemoryBudget) -> PathChoice:
    """The vectorized path in chunks that fit in memory (:func:`_chunk`), or the loop if none does."""
    chunk, per_victim = _chunk(candidates, victims, device, memory)
    if chunk == 0:
        return PathChoice("loop", 1, bytes_per_victim=per_victim)
    return PathChoice("vectorized", chunk, bytes_per_victim=per_victim)


def _chunk(
    candidates: Candidates, victims: int, device: torch.device, memory: MemoryBudget = MemoryBudget()
) -> tuple[int, float | None]:
    """Victims per vectorized chunk that fit in half the free memory, from a measured step of a few."""
    probe = min(victims, 4)
    # one step first: what a first step allocates once (cuBLAS's workspace, which torch frees again
    # around every CUDA-graph recording) is no victim's
    candidates.vectorized(probe, 1)
    before = _reset_peak(device)
    candidates.vectorized(probe, 1)
    peak = _peak(device)
    free = _free_memory(device, memory.limit_gib)
    if before is None or peak is None or free is None:
        return victims, None
    per_victim = max(peak - before, 1) / probe + memory.extra_bytes_per_victim
    return min(victims, int(0.5 * free // per_victim)), per_victim


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _reset_peak(device: torch.device) -> float | None:
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
        return float(torch.cuda.memory_allocated(device))
    try:  # Linux: writing 5 to clear_refs resets the peak resident size (VmHWM)
        Path("/proc/self/clear_refs").write_text("5")
        return _status_kib("VmRSS") * 1024.0
    except (OSError, ValueError):
        return None


def _peak(device: torch.device) -> float | None:
    """Peak bytes since the last reset: torch's on a GPU, the resident size's high-water mark on a CPU."""
    return _process_bytes(device, torch.cuda.max_memory_allocated, "VmHWM")


def _free_memory(device: torch.device, limit_gib: float | None = None) -> float | None:
    """Bytes free for this process: the device's free memory, under the process's share of a GPU
    (``torch.cuda.set_per_process_memory_fraction``) and under ``limit_gib`` less what it already uses."""
    free, in_use, caps = _device_free(device), _in_use(device), []
    if limit_gib is not None:
        caps.append(limit_gib * 2**30)
    cap = _process_cap(device)
    if cap is not None:
        caps.append(cap)
    if free is None or (caps and in_use is None):
        return free
    for cap in caps:
        free = min(free, max(cap - in_use, 0.0))
    return free


def _process_cap(device: torch.device) -> float | None:
    """Bytes this process may allocate on a GPU under ``torch.cuda.set_per_process_memory_fraction``;
    None when no fraction below 1 is set (or torch cannot say)."""
    share = getattr(torch.cuda, "get_per_process_memory_fraction", None)
    if device.type != "cuda" or share is None:
        return None
    index = device.index if device.index is not None else torch.cuda.current_device()
    fraction = share(index)
    return fraction * torch.cuda.get_device_properties(index).total_memory if fraction < 1.0 else None


def _device_free(device: torch.device) -> float | None:
    if device.type == "cuda":
        return float(torch.cuda.mem_get_info(device)[0])
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return float(line.split()[1]) * 1024.0
    except OSError:
        return None
    return None


def _in_use(device: torch.device) -> float | None:
    """Bytes this process holds on the device: torch's reserved GPU memory, or the resident size."""
    return _process_bytes(device, torch.cuda.memory_reserved, "VmRSS")


def _process_bytes(device: torch.device, on_gpu: Callable[[torch.device], int], status: str) -> float | None:
    """``on_gpu(device)`` on a GPU, else the field ``status`` of /proc/self/status (None elsewhere)."""
    if device.type == "cuda":
        return float(on_gpu(device))
    try:
        return _status_kib(status) * 1024.0
    except (OSError, ValueError):
        return None


def _status_kib(field_name: str) -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field_name + ":"):
            return float(line.split()[1])
    raise ValueError(field_name)


def _path(folder: str | Path | None = None) -> Path:
    return (Path(folder).expanduser() if folder is not None else default_cache_dir()) / CALIBRATION_FILE


def _load(memo: str, folder: str | Path | None = None) -> PathChoice | None:
    try:
        entry = json.loads(_path(folder).read_text())[memo]
        return PathChoice(**entry)
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _save(memo: str, choice: PathChoice, folder: str | Path | None = None) -> None:
    path = _path(folder)
    try:
        known = json.loads(path.read_text()) if path.exists() else {}
    except (OSError, ValueError):
        known = {}
    known[memo] = asdict(choice)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps(known, indent=1))
        tmp.replace(path)
    except OSError:
        pass  # a read-only cache folder: the decision is remembered for this process only
