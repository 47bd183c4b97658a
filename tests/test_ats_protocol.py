"""ATS as its paper writes it (Gao et al., Sec. 4.2–4.5, 5.1, Algorithm 1): policies of *up to* three
entries, Eq. 5's one cosine, the training-accuracy score, a fresh random model per policy, the FSIM
pre-filter, a hybrid set without common entries, and the Table 2(b) ConvNet policies by default."""

from __future__ import annotations

import pytest
import torch

from leakshield.artifacts import ArtifactCache
from leakshield.data import load_dataset
from leakshield.defenses import create_defense
from leakshield.defenses.ats import Policy, SearchParams, search_policies
from leakshield.defenses.ats.candidates import disjoint_best, mean_fsim, policy_seed, reinitialized
from leakshield.defenses.ats.library import LIBRARY_SIZE
from leakshield.defenses.ats.policy import random_policy, shares_functions
from leakshield.defenses.ats.scores import accuracy_score, gradsim, gradsim_curves
from leakshield.defenses.ats.search import sample_per_class
from leakshield.metrics.fsim import fsim
from leakshield.models import create_model


@pytest.fixture(scope="module")
def digits():
    return load_dataset("digits", {"channels": 1, "size": 16})


def test_policies_have_up_to_three_entries_drawn_uniformly_from_the_search_space():
    # Sec. 4.4: the space holds Σ_{i≤3} 50^i = 127,550 policies, so lengths 1, 2, 3 have probabilities
    # 50/127550, 2500/127550, 125000/127550. 20,000 draws: length 2 expected 392 (sd 19.4), length 1 7.8.
    gen = torch.Generator().manual_seed(0)
    lengths = [len(random_policy(gen).ops) for _ in range(20_000)]
    counts = {n: lengths.count(n) for n in (1, 2, 3)}
    space = sum(LIBRARY_SIZE**n for n in (1, 2, 3))
    assert space == 127_550
    assert counts[1] >= 1 and abs(counts[2] - 20_000 * 2500 / space) < 4 * 19.4
    exact = torch.Generator().manual_seed(0)
    assert {len(random_policy(exact, exact=True).ops) for _ in range(200)} == {3}


def test_gradsim_is_eq5_one_cosine_of_the_whole_gradient_and_per_layer_is_an_option(digits):
    model = create_model("convnet", {"width": 8}, in_shape=digits.info.shape, num_classes=10, seed=0)
    x, y = digits.public.x[:2], digits.public.y[:2]
    starts = torch.rand(x.shape, generator=torch.Generator().manual_seed(0))
    curves = gradsim_curves(model, x, y, starts, digits.info, points=3)
    # by hand: the gradient at x'(1/3) of image 0 against the gradient at x̂, concatenated
    net = model.eval()
    xs = digits.info.normalize(x)
    point = digits.info.normalize(starts[:1]) * (2 / 3) + xs[:1] / 3

    def flat_grad(inputs: torch.Tensor) -> tuple[torch.Tensor, list[torch.Tensor]]:
        loss = torch.nn.functional.cross_entropy(net(inputs), y[:1])
        grads = torch.autograd.grad(loss, list(net.parameters()))
        return torch.cat([g.flatten() for g in grads]), [g.flatten() for g in grads]

    (g_point, layers_point), (g_ref, layers_ref) = flat_grad(point), flat_grad(xs[:1])
    eq5 = torch.nn.functional.cosine_similarity(g_point, g_ref, dim=0)
    assert float(curves[0, 1]) == pytest.approx(float(eq5), abs=1e-5)
    per_layer = gradsim(layers_point, layers_ref, "per-layer")
    assert float(per_layer) != pytest.approx(float(eq5), abs=1e-3)  # the two rules differ here
    by_layer = gradsim_curves(model, x, y, starts, digits.info, points=3, rule="per-layer")
    assert float(by_layer[0, 1]) == pytest.approx(float(per_layer), abs=1e-5)


def test_search_defaults_are_the_papers():
    params = SearchParams()
    assert (params.accuracy, params.gradsim, params.reinit, params.disjoint) == (
        "training",
        "global",
        True,
        True,
    )
    assert (params.ops, params.exact_ops, params.alpha, params.beta, params.points) == (
        3,
        False,
        0.7,
        0.3,
        20,
    )
    assert params.fsim_threshold == 0.3
    defense = create_defense("ats", {})
    assert str(defense.policy_set) == "21-13-3+15-48-15"  # Table 2(b), ConvNet on CIFAR-100
    first, second = defense.policy_set.policies
    assert not shares_functions(first, second)


def test_a_hybrid_set_shares_no_library_entry():
    ranked = ["21-13-3", "3-1-7", "13", "15-48-15", "7-4-15"]
    assert disjoint_best(ranked, 2, disjoint=True) == ["21-13-3", "15-48-15"]
    assert disjoint_best(ranked, 3, disjoint=True) == ["21-13-3", "15-48-15"]  # 7-4-15 shares 15
    assert disjoint_best(ranked, 2, disjoint=False) == ["21-13-3", "3-1-7"]
    assert shares_functions(Policy.parse("3-1-7"), Policy.parse("21-13-3"))
    assert not shares_functions(Policy.parse("16"), Policy.parse("17"))  # two equalize entries, distinct


def test_each_policy_is_scored_on_its_own_fresh_random_model(digits, tmp_path):
    model = create_model("convnet", {"width": 8}, in_shape=digits.info.shape, num_classes=10, seed=0)
    fresh = reinitialized(model, 5)
    again = reinitialized(model, 5)
    other = reinitialized(model, 6)
    state = torch.random.get_rng_state()
    reinitialized(model, 5)
    assert torch.equal(state, torch.random.get_rng_state())
    first = next(iter(fresh.parameters()))
    assert torch.equal(first, next(iter(again.parameters())))
    assert not torch.equal(first, next(iter(other.parameters())))
    assert not torch.equal(first, next(iter(model.parameters())))
    params = SearchParams(
        candidates=1,
        include=["3-1-7", "12"],
        keep=1,
        accuracy="jacobian",
        accuracy_batches=2,
        images_per_class=1,
        points=2,
        fsim_threshold=None,
        privacy_model={"epochs": 0},
    )
    result = search_policies(model, digits.public, digits.info, params, seed=0, cache=ArtifactCache(tmp_path))
    for record in result.scores:
        policy = Policy.parse(record.policy)
        own = reinitialized(model.eval(), policy_seed(policy, 0))
        expected = accuracy_score(own, policy, digits.public, digits.info, batches=2, seed=0)
        assert record.accuracy == pytest.approx(expected, rel=1e-9)
    shared = search_policies(
        model,
        digits.public,
        digits.info,
        params.model_copy(update={"reinit": False}),
        seed=0,
        cache=ArtifactCache(tmp_path),
    )
    baseline = accuracy_score(model, Policy.parse("3-1-7"), digits.public, digits.info, batches=2, seed=0)
    assert shared.scores[0].accuracy == pytest.approx(baseline, rel=1e-9)
    assert shared.scores[0].accuracy != pytest.approx(result.scores[0].accuracy, rel=1e-6)


def test_fsim_is_one_on_identical_images_and_falls_with_distortion(digits):
    # Zhang et al. 2011: 1 for identical images; lower the more structure moves. Measured on 20 digits
    # (16 px): translateX by 9 → 0.43, translateY by 2 → 0.77, sharpness(1) → 1.00, a flat image 0.13.
    x = digits.public.x[:20]
    assert torch.allclose(fsim(x, x), torch.ones(20, dtype=torch.float64))
    assert float(fsim(x, torch.zeros_like(x)).mean()) < 0.2  # measured 0.126
    images = sample_per_class(digits.public, 10, 2, 0)
    far, near = mean_fsim(Policy.parse("3"), images, 0), mean_fsim(Policy.parse("7"), images, 0)
    assert far < near - 0.2 and near < 0.95


def test_the_fsim_prefilter_drops_distorting_policies_before_scoring(digits, tmp_path):
    model = create_model("convnet", {"width": 8}, in_shape=digits.info.shape, num_classes=10, seed=0)
    # on 10 grey digits: 3-1-7 (two shifts) FSIM 0.45, 12 (colour, nothing on grey) 1.0, 7 (shiftY 2) 0.77
    params = SearchParams(
        candidates=1,
        include=["3-1-7", "12", "7"],
        keep=1,
        accuracy="jacobian",
        accuracy_batches=2,
        images_per_class=1,
        points=2,
        fsim_threshold=0.6,
        privacy_model={"epochs": 0},
    )
    result = search_policies(model, digits.public, digits.info, params, seed=0, cache=ArtifactCache(tmp_path))
    by_policy = {s.policy: s for s in result.scores}
    assert by_policy["3-1-7"].fsim < 0.6 and not by_policy["3-1-7"].passed
    assert by_policy["3-1-7"].accuracy != by_policy["3-1-7"].accuracy  # NaN: never scored
    assert by_policy["12"].fsim == pytest.approx(1.0, abs=1e-4) and by_policy["7"].fsim > 0.6
    assert "3-1-7" not in str(result.chosen)
    with pytest.raises(ValueError, match="fsim_threshold"):
        search_policies(
            model,
            digits.public,
            digits.info,
            params.model_copy(update={"include": ["3-1-7"], "fsim_threshold": 0.99}),
            seed=0,
            cache=ArtifactCache(tmp_path),
        )
