"""The pretrained model a federation fine-tunes (fully, or through LoRA adapters on a frozen backbone):
no pretrained weights can be downloaded, so the stand-in for a public pretrained model is the same
transformer trained centrally on the server's public split, with one of two objectives:

- ``classifier`` (the default): the task itself on the public split's labels, backbone and head. A
  pretrained model whose features already carry the task is what LoRA assumes; ``benchmarks/text_lora.yaml``
  measures the accuracy it starts from and what full and LoRA fine-tuning add to it (docs/lora.md).
- ``language-model``: the backbone as a language model, the head left as drawn (for experiments: a
  language model of 2,581 reviews is a weak stand-in for a pretrained one).

Language-model objectives:
- GPT-2: next-token prediction through its word embedding (tied output layer, Radford et al., 2019).
- BERT: masked-token prediction (Devlin et al., NAACL 2019, Sec. 3.1): 15 % of the real tokens other
  than ``[CLS]``/``[SEP]`` are chosen, 80 % of them replaced by ``[UNK]`` (the tokenizer has no
  ``[MASK]``), 10 % by a random id, 10 % kept, and predicted through the tied word embedding.

Fitted once per (starting weights, model shape, objective, public split, epochs, lr, seed) and cached like
every other fit.
"""

from __future__ import annotations

import hashlib
from typing import Literal

import torch
import torch.nn.functional as F
from tqdm.auto import tqdm

from leakshield.artifacts import Artifact, ArtifactCache, FitKey
from leakshield.text.models import TextClassifier
from leakshield.text.tokenizer import CLS, PAD, SEP, SPECIALS, UNK

PretrainObjective = Literal["classifier", "language-model"]

#: share of the real tokens a masked-LM step predicts (BERT, Sec. 3.1)
MASK_SHARE = 0.15


def language_model_loss(model: TextClassifier, ids: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
    """The language-model loss of ``model``'s backbone on token ids (N × L): next token (GPT-2) or
    masked token (BERT), logits through the tied word embedding."""
    mask = ids != PAD
    table = model.word_embeddings.weight
    if model.kind == "gpt2":
        states = model.backbone(input_ids=ids, attention_mask=mask.long()).last_hidden_state
        logits = states[:, :-1] @ table.T
        target = ids[:, 1:].masked_fill(~mask[:, 1:], -100)
        return F.cross_entropy(logits.transpose(1, 2), target, ignore_index=-100)
    candidates = mask & (ids != CLS) & (ids != SEP)
    draw = torch.rand(ids.shape, generator=generator)
    chosen = candidates & (draw < MASK_SHARE)
    fate = torch.rand(ids.shape, generator=generator)
    noisy = ids.clone()
    noisy[chosen & (fate < 0.8)] = UNK
    swap = chosen & (fate >= 0.8) & (fate < 0.9)
    noisy[swap] = torch.randint(len(SPECIALS), table.shape[0], (int(swap.sum()),), generator=generator)
    states = model.backbone(input_ids=noisy, attention_mask=mask.long()).last_hidden_state
    if not bool(chosen.any()):
        return states.sum() * 0.0
    return F.cross_entropy(states[chosen] @ table.T, ids[chosen])


def train_backbone(
    model: TextClassifier,
    public: torch.Tensor,
    labels: torch.Tensor,
    *,
    objective: PretrainObjective,
    epochs: int,
    batch_size: int = 32,
    lr: float = 1e-3,
    seed: int = 0,
    progress: bool = False,
) -> TextClassifier:
    """Train ``model`` in place on ``public`` ids (and their ``labels``) with ``objective`` (Adam):
    the whole classifier, or the backbone as a language model; returns it."""
    trained = model.parameters() if objective == "classifier" else model.backbone.parameters()
    optimizer = torch.optim.Adam(trained, lr=lr)
    generator = torch.Generator().manual_seed(seed)
    model.train()
    for _ in tqdm(range(epochs), desc=f"pretraining {model.kind} ({objective})", disable=not progress):
        for rows in torch.randperm(len(public), generator=generator).split(batch_size):
            batch = public[rows]
            if objective == "classifier":
                loss = F.cross_entropy(model(batch), labels[rows])
            else:
                batch = batch[:, : int((batch != PAD).sum(1).max())]
                loss = language_model_loss(model, batch, generator)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
    return model.eval()


def pretrained_model(
    fresh: TextClassifier,
    public: torch.Tensor,
    labels: torch.Tensor,
    *,
    objective: PretrainObjective = "classifier",
    epochs: int,
    lr: float = 1e-3,
    seed: int = 0,
    cache: ArtifactCache | None = None,
    progress: bool = False,
) -> TextClassifier:
    """``fresh`` (a new model from ``seed``) trained on the public split (``public`` ids, ``labels``) for
    ``epochs`` with ``objective`` (0 epochs: left as drawn); loaded from ``cache`` when an equal fit is
    stored."""
    if epochs == 0:
        return fresh
    blob = public.detach().cpu().contiguous().numpy().tobytes() + labels.cpu().numpy().tobytes()
    digest = hashlib.sha256(blob).hexdigest()[:16]
    shape = {
        "kind": fresh.kind,
        "max_length": fresh.max_length,
        "vocab_size": fresh.word_embeddings.num_embeddings,
        "width": fresh.word_embeddings.embedding_dim,
        "layers": fresh.backbone.config.num_hidden_layers,
        "heads": fresh.backbone.config.num_attention_heads,
        "classes": fresh.head.out_features,
    }
    params = {**shape, "objective": objective, "epochs": epochs, "lr": lr}
    start = hashlib.sha256()
    for name, tensor in sorted(fresh.state_dict().items()):
        start.update(name.encode() + tensor.detach().cpu().contiguous().numpy().tobytes())
    key = FitKey(
        "text-pretrained-model", params, "public", digest, seed, context={"start": start.hexdigest()[:16]}
    )

    def fit() -> Artifact:
        trained = train_backbone(fresh, public, labels, objective=objective, epochs=epochs, lr=lr, seed=seed,
                                 progress=progress)  # fmt: skip
        return Artifact({k: v.detach().cpu().clone() for k, v in trained.state_dict().items()}, {})

    artifact = (cache or ArtifactCache()).get_or_fit(key, fit)
    device = fresh.word_embeddings.weight.device
    fresh.load_state_dict({k: v.to(device) for k, v in artifact.tensors.items()})
    return fresh.eval()
