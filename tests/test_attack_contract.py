"""The sealed attack contract, for every registered attack: the client computes on its own copy of
what the server sent, so what an attack reconstructs depends on the server's view only (overwriting the
private data with NaN after the update leaves it unchanged) and no attack or view holds a reference to
an object the client trained on."""

from __future__ import annotations

import dataclasses
import gc

import pytest
import torch
from torch import nn

import leakshield.fl.client as client_module
from leakshield.artifacts import FitData
from leakshield.attacks import ATTACKS, create_attack
from leakshield.data import ImageSet, load_dataset
from leakshield.defenses import DefensePipeline
from leakshield.fl import HonestClient, LocalTraining, ServerKnowledge, ThreatModel, observe_victim
from leakshield.models import create_model
from leakshield.threats import Adversary

#: the smallest budget that exercises each attack's code path
SMALL = {"iterations": 2, "restarts": 1}
SPECIAL = {
    "carlini": {"rounds": 2, "steps": 3, "coefficient_samples": 20, "inner_params": {"iterations": 2}},
    "imprint": {"bins": 8},
    "seer": {"steps": 3, "entries": 16, "latent": 4, "hidden": 8},
    "loda-inverse": {"iterations": 2, "restarts": 1, "inverse_steps": 2},
    "ggl": {"iterations": 2, "generator_steps": 2, "generator_width": 8},
    "ggl-adaptive": {"iterations": 2, "generator_steps": 2, "generator_width": 8},
    "learned-inversion": {"pairs": 8, "epochs": 1, "hidden": 8, "sketch_dim": 16},
    "guide": {"attack_params": {"pairs": 8, "epochs": 1, "hidden": 8, "sketch_dim": 16}, "diffusion_steps": 2,
              "diffusion_width": 4, "diffusion_timesteps": 4},
}
#: target defenses with one-off fits, at the smallest budget
DEFENSE_PARAMS = {"loda": {"steps": 2, "epochs": 1}}


@pytest.fixture(scope="module")
def digits8():
    return load_dataset("digits", {"channels": 1, "size": 8})


def _params(name: str) -> dict:
    if name in SPECIAL:
        return SPECIAL[name]
    fields = ATTACKS.get(name).params.model_fields
    return {k: v for k, v in SMALL.items() if k in fields}


def _reachable(root: object, limit: int = 200_000) -> list[object]:
    """Objects reachable from ``root`` through attributes, containers, dataclasses and modules (not
    through classes, functions or modules of code, which lead to the whole interpreter)."""
    seen: dict[int, object] = {}
    stack = [root]
    skip = (type, type(gc), type(len), type(_reachable))
    while stack and len(seen) < limit:
        obj = stack.pop()
        if id(obj) in seen or isinstance(obj, (*skip, str, bytes, int, float, bool)):
            continue
        seen[id(obj)] = obj
        if isinstance(obj, dict):
            stack.extend(obj.keys())
            stack.extend(obj.values())
        elif isinstance(obj, (list, tuple, set, frozenset)):
            stack.extend(obj)
        elif isinstance(obj, torch.Tensor):
            continue
        elif dataclasses.is_dataclass(obj) or hasattr(obj, "__dict__") or hasattr(obj, "__slots__"):
            stack.extend(vars(obj).values() if hasattr(obj, "__dict__") else [])
            for slot in getattr(type(obj), "__slots__", ()):
                if hasattr(obj, slot):
                    stack.append(getattr(obj, slot))
    return list(seen.values())


#: attacks that need another model than the small MLP, or a batch (SPEAR's search runs from batch 2)
MODELS_FOR = {"april": ("vit", {"dim": 32, "heads": 2, "depth": 1})}
BATCH_FOR = {"spear": 2}


def _scenario(name: str, digits8, monkeypatch):
    """Observe a victim under the attack's first target defense (or none) and reconstruct; returns the
    reconstruction, the attack, the views and the objects the client trained on."""
    entry = ATTACKS.get(name)
    defense = entry.targets[0] if entry.targets else "none"
    pipeline = DefensePipeline.from_config([{"name": defense, "params": DEFENSE_PARAMS.get(defense, {})}])
    info = digits8.info
    model_name, model_params = MODELS_FOR.get(name, ("mlp", {"width": 16}))
    model = create_model(model_name, model_params, in_shape=info.shape, num_classes=10, seed=0)
    model = pipeline.model_hook(model).eval()
    size = BATCH_FOR.get(name, 1)
    batch = ImageSet(digits8.train.x[:size].clone(), digits8.train.y[:size].clone())
    dataset = ImageSet(digits8.train.x[:20].clone(), digits8.train.y[:20].clone())
    cpu = torch.device("cpu")
    client_fits = {
        (0, i): d.fit(FitData(info, dataset, None, 0, cpu, public=digits8.public))
        for i, d in enumerate(pipeline.defenses)
        if d.fit_scope == "client"
    }
    pipeline = pipeline.with_artifacts({}, client_fits) if client_fits else pipeline
    client = HonestClient(
        0, dataset, LocalTraining(), pipeline, info, public=digits8.public, model_mode="eval"
    )
    trained: list[nn.Module] = []
    original_copy = client_module.private_copy

    def recording_copy(sent: nn.Module) -> nn.Module:
        copy = original_copy(sent)
        trained.append(copy)
        return copy

    monkeypatch.setattr(client_module, "private_copy", recording_copy)
    attack = create_attack(name, _params(name))
    if attack.fit_scope == "public":
        attack = attack.with_artifact(attack.fit(FitData(info, digits8.public, model, 0, cpu)))
    rounds = attack.rounds_observed
    observation = observe_victim(
        [model] * rounds,
        batch,
        client,
        threat=ThreatModel(labels_known=True),
        server=attack,
        knowledge=ServerKnowledge(info, digits8.public),
        generators=[torch.Generator().manual_seed(t) for t in range(rounds)],
    )
    return attack, observation.views, batch, dataset, trained


SERVER_ATTACKS = [n for n in ATTACKS.names() if ATTACKS.get(n).threat.adversary is not Adversary.PARTICIPANT]
PARTICIPANT_ATTACKS = [n for n in ATTACKS.names() if n not in SERVER_ATTACKS]


@pytest.mark.parametrize("name", SERVER_ATTACKS)
def test_reconstruction_depends_on_the_servers_view_only(name, digits8, monkeypatch):
    results = []
    for poison in (False, True):
        attack, views, batch, dataset, trained = _scenario(name, digits8, monkeypatch)
        assert len(trained) == len(views)  # the client computed each update on a copy of its own
        if poison:  # the private data is gone once the update is computed
            batch.x.fill_(float("nan"))
            dataset.x.fill_(float("nan"))
            for copy in trained:
                for p in copy.parameters():
                    p.data.fill_(float("nan"))
        torch.manual_seed(0)
        if attack.rounds_observed == 1:
            (rec,) = attack.reconstruct_many([views[0]], seeds=[0])
        else:
            (rec,) = attack.reconstruct_many_from_rounds([views], seeds=[0])
        results.append(rec.images)
        private = {id(t) for t in (batch.x, batch.y, dataset.x, dataset.y)}
        private |= {id(m) for copy in trained for m in copy.modules()}
        private |= {id(p) for copy in trained for p in copy.parameters()}
        held = [o for o in _reachable((attack, views)) if id(o) in private]
        assert not held, (
            f"{name} holds {len(held)} objects of the client's: {[type(o).__name__ for o in held]}"
        )
    assert torch.isfinite(results[0]).all()
    assert torch.equal(results[0], results[1]), name


def test_an_attack_that_keeps_the_model_it_sent_learns_nothing_from_it(digits8):
    """PRECODE's bottleneck caches its latest statistics (μ, σ of the private batch). An attack that
    keeps a reference to the model it sent finds them empty: the client computed on its own copy."""
    from leakshield.fl import PreparedModel

    info = digits8.info
    pipeline = DefensePipeline.from_config([{"name": "precode", "params": {"k": 8}}])
    model = pipeline.model_hook(
        create_model("mlp", {"width": 16}, in_shape=info.shape, num_classes=10)
    ).eval()

    class KeepsTheModel:
        def prepare_model(self, sent, knowledge):
            self.sent = sent
            return PreparedModel(sent)

    spy = KeepsTheModel()
    client = HonestClient(0, digits8.train.subset([0]), LocalTraining(), pipeline, info, model_mode="eval")
    view = observe_victim(
        [model],
        digits8.train.subset([0]),
        client,
        threat=ThreatModel(),
        server=spy,
        knowledge=ServerKnowledge(info, digits8.public),
    ).views[0]
    assert spy.sent.classifier[0].last_mu is None and view.model.classifier[0].last_mu is None
    assert view.update.delta["classifier.0.encoder.weight"].abs().sum() > 0  # yet the client did compute


def test_an_attack_that_overrides_reconstruct_also_overrides_the_vectorized_path():
    """The grid calls ``reconstruct_many``; GradientInversion's vectorized version never calls
    ``reconstruct``, so a subclass that changes ``reconstruct`` must change ``reconstruct_many`` too
    (LODA's inverse attack once returned plain IG in a grid)."""
    from leakshield.attacks import ATTACKS
    from leakshield.attacks.passive.inversion.engine import GradientInversion

    for entry in ATTACKS:
        cls = entry.factory
        if not (isinstance(cls, type) and issubclass(cls, GradientInversion)) or cls is GradientInversion:
            continue
        chain = cls.__mro__[: cls.__mro__.index(GradientInversion)]
        overrides = [c for c in chain if "reconstruct" in vars(c)]
        if overrides:
            assert any("reconstruct_many" in vars(c) for c in chain), entry.name


def test_every_registered_attack_declares_a_threat_model():
    from leakshield.threats import Threat

    for entry in ATTACKS:
        assert isinstance(entry.threat, Threat), entry.name
    with pytest.raises(ValueError, match="threat"):
        ATTACKS.register("undeclared", summary="no threat")(object)


@pytest.mark.parametrize("name", PARTICIPANT_ATTACKS)
def test_a_participant_attack_never_receives_private_data(name, digits8):
    """A participant attack's only inputs are its own client's data and the models sent to it; its only
    output is what it releases. No method of the attack or of its client takes the other clients' data,
    and what it releases does not change when the other clients' images are destroyed afterwards."""
    import inspect

    from leakshield.fl import LocalTraining

    attack = create_attack(name, {"width": 8, "generator_steps": 1, "head_steps": 1, "inject": 4})
    own = digits8.train.subset([i for i in range(len(digits8.train)) if digits8.train.y[i] >= 5][:40])
    others = digits8.train.subset([i for i in range(len(digits8.train)) if digits8.train.y[i] < 5][:40])
    attacker = attack.participant(1, own, LocalTraining(algorithm="fedavg", batch_size=16), digits8.info, 0)
    for owner in (attack, attacker):
        for method_name, method in inspect.getmembers(owner, callable):
            if method_name.startswith("_"):
                continue
            try:
                parameters = inspect.signature(method).parameters
            except (TypeError, ValueError):
                continue
            assert not {"private", "truth", "victims", "others"} & set(parameters), (name, method_name)
    model = create_model("lenet", {}, in_shape=digits8.info.shape, num_classes=10)
    honest = HonestClient(0, others, LocalTraining(algorithm="fedavg", batch_size=16), DefensePipeline(),
                          digits8.info)  # fmt: skip
    for round in range(2):
        honest.fit(model, round)
        attacker.fit(model, round)
    attacker.finish(model)
    first = attacker.release(6, seed=3)
    others.x.fill_(float("nan"))  # the other clients' data is gone: the release cannot depend on it
    again = attacker.release(6, seed=3)
    assert torch.isfinite(first.x).all() and torch.equal(first.x, again.x) and torch.equal(first.y, again.y)
    held = [o for o in _reachable((attack, attacker)) if o is others.x or o is others.y]
    assert not held
