"""A cross-device population: every client's data padded into one tensor, so a round's local training
runs for all sampled clients at once (:mod:`leakshield.crossdevice.federation`).

* :func:`movie_population`: text, one client per movie of the corpus's train split (Rotten Tomatoes:
  301 movies of 2–35 reviews, median 34), tokenized with the tokenizer fitted on the public split; the
  test split's movies are disjoint.
* :func:`digit_population`: scikit-learn's 8×8 digits in [0, 1], a public fifth and a test fifth held
  out, the rest dealt to N clients by label proportions drawn from Dirichlet(α) (Hsu et al., 2019):
  small α, few labels per client.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from leakshield.artifacts import ArtifactCache
from leakshield.errors import ConfigError

#: token ids of the specials (the tokenizer's PAD, UNK, CLS, SEP): never part of a leaked word set
SPECIAL_IDS = 4


@dataclass(frozen=True)
class Population:
    """``x``: clients × rows × features (token ids, long, for text; pixels, float, for images);
    ``y``: clients × rows labels; ``valid``: clients × rows, True where a row holds a sample.
    ``test_x``/``test_y``: the held-out test split. ``kind``: ``text`` or ``image``; ``vocab``: the
    vocabulary size (text); ``classes``; ``public_counts``: how often each token occurs in the public
    split (text; the attacker's prior); ``public_x``: the public images (image; the attacker's
    no-information candidates)."""

    x: torch.Tensor
    y: torch.Tensor
    valid: torch.Tensor
    test_x: torch.Tensor
    test_y: torch.Tensor
    kind: str
    classes: int
    vocab: int = 0
    public_counts: torch.Tensor | None = None
    public_x: torch.Tensor | None = None
    name: str = ""

    @property
    def clients(self) -> int:
        return self.x.shape[0]

    def to(self, device: str | torch.device) -> Population:
        """The same population with its tensors on ``device``."""
        from dataclasses import replace

        return replace(self, x=self.x.to(device), y=self.y.to(device), valid=self.valid.to(device),
                       test_x=self.test_x.to(device), test_y=self.test_y.to(device))  # fmt: skip

    def sizes(self) -> torch.Tensor:
        return self.valid.sum(1)

    def token_sets(self, clients: torch.Tensor) -> list[set[int]]:
        """Each listed client's token ids (specials excluded): what a word-set attack should read."""
        out = []
        for k in clients.tolist():
            ids = self.x[k][self.valid[k]].flatten()
            out.append({int(t) for t in ids.unique() if t >= SPECIAL_IDS})
        return out


def _padded(parts: list[torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
    """Stack ``parts`` (each n_k × …) into clients × max n_k × … with a validity mask."""
    width = max(len(p) for p in parts)
    shape = (len(parts), width, *parts[0].shape[1:])
    x = torch.zeros(shape, dtype=parts[0].dtype)
    valid = torch.zeros(len(parts), width, dtype=torch.bool)
    for k, part in enumerate(parts):
        x[k, : len(part)] = part
        valid[k, : len(part)] = True
    return x, valid


def movie_population(corpus: str | Path, *, max_length: int = 32, vocab_size: int = 2000,
                     min_reviews: int = 2, split_seed: int = 0, cache: ArtifactCache | None = None,
                     ) -> Population:  # fmt: skip
    """One client per movie of the Rotten Tomatoes train split at ``corpus`` (the CSV, bzip2 or not);
    movies with fewer than ``min_reviews`` reviews are dropped; ``cache`` keeps the fitted tokenizer."""
    from leakshield.text.dataset import load_text_data, read_corpus

    data = load_text_data(read_corpus(corpus, "rotten-tomatoes"), max_length=max_length,
                          vocab_size=vocab_size, split_seed=split_seed, cache=cache)  # fmt: skip
    members: dict[str, list[int]] = {}
    for i, group in enumerate(data.groups):
        members.setdefault(group, []).append(i)
    chosen = [torch.tensor(rows) for _, rows in sorted(members.items()) if len(rows) >= min_reviews]
    if len(chosen) < 2:
        raise ConfigError(f"population: {len(chosen)} movies with ≥ {min_reviews} reviews; need 2 or more")
    x, valid = _padded([data.train.x[r] for r in chosen])
    y, _ = _padded([data.train.y[r] for r in chosen])
    counts = torch.bincount(data.public.x.flatten(), minlength=data.info.vocab_size)
    counts[:SPECIAL_IDS] = 0
    return Population(x, y, valid, data.test.x, data.test.y, "text", data.info.num_classes,
                      vocab=data.info.vocab_size, public_counts=counts,
                      name="Rotten Tomatoes by movie")  # fmt: skip


def digit_population(clients: int = 100, alpha: float = 0.5, seed: int = 0) -> Population:
    """scikit-learn's digits (8×8, scaled to [0, 1], flattened): 20 % test, 20 % public (the attacker's
    own images, kept out of the clients), the rest dealt to ``clients`` clients by Dirichlet(``alpha``) label
    proportions, every client at least 2 images. A pure function of its arguments."""
    from sklearn.datasets import load_digits

    if clients < 2:
        raise ConfigError(f"population.clients: at least 2, got {clients}")
    if not (alpha > 0 and math.isfinite(alpha)):
        raise ConfigError(f"population.alpha: a finite number above 0, got {alpha}")
    bunch = load_digits()
    rng = np.random.default_rng(seed)
    order = rng.permutation(len(bunch.target))
    n_test = n_public = len(order) // 5
    test, public, train = order[:n_test], order[n_test : n_test + n_public], order[n_test + n_public :]
    if len(train) < 2 * clients:
        raise ConfigError(f"population.clients: {clients} clients for {len(train)} images; at most "
                          f"{len(train) // 2}")  # fmt: skip
    x_all = torch.from_numpy(bunch.data).float() / 16.0
    y_all = torch.from_numpy(bunch.target).long()
    labels = bunch.target[train]
    shares = rng.dirichlet(np.full(clients, alpha), size=10)  # per label: how it splits over clients
    owner = np.empty(len(train), dtype=np.int64)
    for label in range(10):
        rows = np.flatnonzero(labels == label)
        owner[rows] = rng.choice(clients, size=len(rows), p=shares[label])
    for k in range(clients):  # top up empty or single-image clients from the largest ones
        while (owner == k).sum() < 2:
            largest = np.bincount(owner, minlength=clients).argmax()
            owner[np.flatnonzero(owner == largest)[0]] = k
    parts = [torch.from_numpy(train[owner == k]) for k in range(clients)]
    x, valid = _padded([x_all[p] for p in parts])
    y, _ = _padded([y_all[p] for p in parts])
    return Population(x, y, valid, x_all[test], y_all[test], "image", 10, public_x=x_all[public],
                      name=f"digits, {clients} clients, Dirichlet {alpha}")  # fmt: skip
