"""Fitted artifacts: the results of expensive one-off preparation (a public feature extractor, a
generator, a policy search, a client's encoded dataset), stored content-addressed and reused.

An :class:`Artifact` is tensors plus JSON metadata, saved as ``tensors.safetensors`` and ``meta.json``
(never pickle). Its address is the SHA-256 of everything that determines it (:class:`FitKey`: the
component and its parameters, the scope and client, a fingerprint of the data the fit may see, the
seed and leakshield's version). The cache checks the tensors file's hash on every load: a corrupt or
truncated artifact is reported in one line and recomputed, never used.

The cache folder is ``--cache-dir``, else ``$LEAKSHIELD_CACHE_DIR``, else ``$XDG_CACHE_HOME/leakshield``
(``~/.cache/leakshield``).
"""

from __future__ import annotations

import copy
import functools
import hashlib
import json
import os
import shutil
import sys
import tempfile
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, ClassVar, Literal, Self

import torch
from safetensors.torch import load_file, save_file
from torch import nn

from leakshield import __version__
from leakshield.data.types import DatasetInfo, ImageSet
from leakshield.errors import LeakshieldError
from leakshield.fit_lock import fit_lock

CACHE_ENV = "LEAKSHIELD_CACHE_DIR"
TENSORS_FILE = "tensors.safetensors"
META_FILE = "meta.json"
FitScope = Literal["public", "client"]


@dataclass(frozen=True)
class Artifact:
    """The result of a fit: named tensors (on the CPU) and JSON-serializable metadata; ``key`` is its
    content address once stored (empty before)."""

    tensors: Mapping[str, torch.Tensor]
    metadata: Mapping[str, Any] = field(default_factory=dict)
    key: str = ""


@dataclass(frozen=True)
class FitData:
    """What a fit may see: the dataset's public ``info``, ``data`` (the public split for a public fit,
    the one client's dataset for a client fit), the ``model`` the server built for the cell (after the
    defenses' model stage; a fit may train copies of it, never the original), the ``seed``, the
    ``device``, whether to show progress bars and the run's ``cache``."""

    info: DatasetInfo
    data: ImageSet
    model: nn.Module | None
    seed: int
    device: torch.device
    progress: bool = False
    #: the run's artifact cache, for fits that cache their own intermediate results (ATS's scores)
    cache: ArtifactCache | None = None
    #: the dataset's public split, which every client may hold too (LODA's starting images); for a
    #: client fit, ``data`` is still that one client's data only
    public: ImageSet | None = None


class Fittable:
    """What defenses and attacks share for one-off preparation: ``fit_scope`` (None: no fit; ``public``:
    the fit sees the public split only; ``client``: one client's data only), :meth:`fit`, and
    :meth:`with_artifact`, which hands the result over explicitly."""

    name: str
    fit_scope: ClassVar[FitScope | None] = None
    #: the fitted artifact this component was given (:meth:`with_artifact`)
    artifact: Artifact | None = None

    def fit(self, data: FitData) -> Artifact:
        """One-off preparation from ``data`` only (``fit_scope`` says which data); returns an artifact."""
        raise NotImplementedError(f"{self.name} declares fit_scope {self.fit_scope!r} but no fit()")

    def with_artifact(self, artifact: Artifact) -> Self:
        """A copy holding ``artifact``."""
        other = copy.copy(self)
        other.artifact = artifact
        return other


def file_digest(path: Path) -> str:
    """SHA-256 of a file's bytes (remembered per path, size and modification time)."""
    stat = path.stat()
    return _file_digest(str(path.resolve()), stat.st_size, stat.st_mtime_ns)


@functools.lru_cache(maxsize=256)
def _file_digest(path: str, size: int, mtime: int) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def with_file_digests(params: Mapping[str, Any]) -> dict[str, Any]:
    """``params`` with the content hash of every file a string value names (``{field}@sha256``): a
    weights file overwritten with other tensors gives another key, so a fit is never silently reused for
    different inputs."""
    out = dict(params)
    for name, value in params.items():
        if isinstance(value, str) and value and "\x00" not in value:
            try:
                path = Path(value).expanduser()
                if path.is_file():
                    out[f"{name}@sha256"] = file_digest(path)
            except OSError:
                continue
        elif isinstance(value, Mapping):
            out[name] = with_file_digests(value)
    return out


@dataclass(frozen=True)
class FitKey:
    """Everything that determines an artifact. ``scope``: ``public`` (the fit saw the public split
    only) or ``client`` (it saw that one ``client``'s data only). ``data``: a fingerprint of that data
    (:func:`data_fingerprint`); ``context``: further facts the fit depends on (e.g. the model it was
    fitted for)."""

    component: str
    params: Mapping[str, Any]
    scope: FitScope
    data: str
    seed: int
    client: int | None = None
    context: Mapping[str, Any] = field(default_factory=dict)

    def payload(self) -> dict[str, Any]:
        return {
            "component": self.component,
            "params": with_file_digests(self.params),
            "scope": self.scope,
            "client": self.client,
            "data": self.data,
            "seed": self.seed,
            "context": dict(self.context),
            "version": __version__,
        }

    @property
    def digest(self) -> str:
        blob = json.dumps(self.payload(), sort_keys=True, separators=(",", ":"), default=str)
        return hashlib.sha256(blob.encode()).hexdigest()


def data_fingerprint(data: ImageSet) -> str:
    """SHA-256 (first 16 hex digits) of a dataset's pixels, labels and flags."""
    digest = hashlib.sha256()
    for tensor in (data.x, data.y, data.sensitive):
        if tensor is not None:
            t = tensor.detach().cpu().contiguous()
            digest.update(str((t.dtype, tuple(t.shape))).encode())
            digest.update(t.numpy().tobytes())
    return digest.hexdigest()[:16]


def default_cache_dir() -> Path:
    if os.environ.get(CACHE_ENV):
        return Path(os.environ[CACHE_ENV]).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "leakshield"


def _file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


class CorruptArtifactError(Exception):
    """A stored artifact failed its checks (the message says which)."""


class ArtifactCache:
    """Content-addressed artifact store under ``root`` (created on first write)."""

    def __init__(self, root: str | Path | None = None) -> None:
        self.root = Path(root).expanduser() if root is not None else default_cache_dir()
        #: digests fitted (not loaded) by this cache object, for reporting and tests
        self.fitted: list[str] = []

    def path(self, digest: str) -> Path:
        return self.root / digest[:2] / digest

    def load(self, key: FitKey) -> Artifact | None:
        """The stored artifact of ``key``; None if absent. Raises :class:`CorruptArtifactError`."""
        folder = self.path(key.digest)
        if not folder.exists():
            return None
        try:
            meta = json.loads((folder / META_FILE).read_text())
            tensors_path = folder / TENSORS_FILE
            if meta.get("sha256") != _file_sha256(tensors_path):
                raise CorruptArtifactError("tensors file does not match its recorded SHA-256")
            if meta.get("key") != key.payload():
                raise CorruptArtifactError("recorded key does not match its address")
            tensors = load_file(str(tensors_path))
        except CorruptArtifactError:
            raise
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise CorruptArtifactError(f"unreadable ({type(exc).__name__}: {exc})") from None
        except Exception as exc:  # safetensors raises its own error types on a damaged header
            raise CorruptArtifactError(f"unreadable ({type(exc).__name__}: {exc})") from None
        return Artifact(tensors=tensors, metadata=meta.get("metadata", {}), key=key.digest)

    def save(self, key: FitKey, artifact: Artifact) -> Artifact:
        """Store ``artifact`` under ``key`` atomically (a temporary folder renamed into place)."""
        digest = key.digest
        folder = self.path(digest)
        folder.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{digest[:12]}.", dir=folder.parent))
        try:
            tensors = {k: v.detach().cpu().contiguous() for k, v in artifact.tensors.items()}
            save_file(tensors, str(tmp / TENSORS_FILE))
            meta = {
                "key": key.payload(),
                "sha256": _file_sha256(tmp / TENSORS_FILE),
                "metadata": dict(artifact.metadata),
            }
            (tmp / META_FILE).write_text(json.dumps(meta, indent=2, sort_keys=True, default=str))
            for _ in range(3):  # concurrent writers of one key write the same content: one rename wins
                if self._valid(key, folder):
                    break  # another writer stored it first: keep theirs
                shutil.rmtree(folder, ignore_errors=True)  # absent, or a damaged leftover
                try:
                    os.replace(tmp, folder)
                    break
                except OSError:  # another writer renamed in between (the folder is not empty)
                    continue
            else:
                raise OSError(f"could not store artifact {digest[:12]} in {folder.parent}")
        finally:
            if tmp.exists():
                shutil.rmtree(tmp, ignore_errors=True)
        return Artifact(tensors=tensors, metadata=dict(artifact.metadata), key=digest)

    def _valid(self, key: FitKey, folder: Path) -> bool:
        if not folder.exists():
            return False
        try:
            return self.load(key) is not None
        except (CorruptArtifactError, OSError):
            return False

    def ensure_usable(self) -> None:
        """Refuse an unusable cache folder (a file, an unwritable folder) before any work is done."""
        try:
            self.root.mkdir(parents=True, exist_ok=True)
            handle, probe = tempfile.mkstemp(prefix=".probe.", dir=self.root)
            os.close(handle)
            os.unlink(probe)
        except OSError as exc:
            raise LeakshieldError(
                f"--cache-dir {self.root}: not a writable folder ({exc.strerror or exc}); choose another "
                "(or set $LEAKSHIELD_CACHE_DIR)"
            ) from None

    def get_or_fit(self, key: FitKey, fit: Callable[[], Artifact]) -> Artifact:
        """The stored artifact of ``key``, else ``fit()`` stored under it; processes that need it at
        once fit it once (:mod:`leakshield.fit_lock`). A corrupt stored artifact is reported on stderr
        (one line) and recomputed."""
        found = self._load_or_forget(key)
        if found is not None:
            return found
        with fit_lock(self.path(key.digest).parent, key.digest, key.component):
            found = self._load_or_forget(key)  # fitted by another process while this one waited
            if found is not None:
                return found
            artifact = self.save(key, fit())
        self.fitted.append(artifact.key)
        return artifact

    def _load_or_forget(self, key: FitKey) -> Artifact | None:
        try:
            return self.load(key)
        except CorruptArtifactError as exc:
            sys.stderr.write(
                f"leakshield: artifact {key.digest[:12]} of {key.component} is corrupt ({exc}); recomputing\n"
            )
            shutil.rmtree(self.path(key.digest), ignore_errors=True)
            return None


@dataclass(frozen=True)
class Checkpoints:
    """Checkpoints of one long loop (a GAN's training, a condensation) in an artifact cache: the artifact
    of ``key`` with the step added to its context, one every ``every`` steps; None cache: no checkpoints."""

    cache: ArtifactCache | None
    key: FitKey
    every: int

    def at(self, step: int) -> FitKey:
        return replace(self.key, context={**self.key.context, "checkpoint_step": step})

    def latest(self, steps: int) -> tuple[int, dict[str, torch.Tensor]] | None:
        if self.cache is None:
            return None
        for step in sorted({*range(self.every, steps + 1, self.every), steps}, reverse=True):
            try:
                found = self.cache.load(self.at(step))
            except CorruptArtifactError:
                found = None
            if found is not None:
                return step, dict(found.tensors)
        return None

    def save(self, step: int, tensors: dict[str, torch.Tensor]) -> None:
        if self.cache is not None:
            self.cache.save(
                self.at(step), Artifact({k: v.detach().cpu().clone() for k, v in tensors.items()})
            )
