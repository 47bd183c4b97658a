"""The general mutation run over the pure-math modules and the fate of its survivors.

``mutmut`` 3.8 (configured in pyproject.toml, ``[tool.mutmut]``) mutated ``metrics/``,
``leaderboard/ranking.py``, ``attacks/passive/labels.py`` and ``defenses/ats/policy.py`` and ran, for each
mutant, the tests of its selection that cover the mutated function. Every survivor was either killed
by a new test (named in the table) or judged equivalent here, with the reason. The test below keeps
this list honest as the code moves: each entry names a line as it stands in the source, so an entry
whose line changed fails and must be judged again.

Equivalence classes used below:

- ``device``: a ``device=`` argument dropped or set to None, equivalent where the tests run (CPU); on
  CUDA the mixed-device operation fails loudly at once, it cannot give a wrong number.
- ``message``: only an error's text changed (the error type and the words a user needs are asserted
  where they matter: ``match=`` in the tests of each module).
- ``import``: code that runs when the module is imported (the metric registry is built then); mutmut
  switches a mutant on inside a test, after that, so these mutants never run.
- ``redundant``: a guard or argument that the surrounding code makes redundant (named per entry).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src" / "leakshield"


@dataclass(frozen=True)
class Survivor:
    file: str  #: relative to src/leakshield
    line: str  #: the original line (stripped), as it stands in the source
    mutations: str  #: what mutmut changed
    fate: str  #: "killed: <test>" or "equivalent (<class>): why"


SURVIVORS = [
    # metrics/class_ssim.py
    Survivor("metrics/class_ssim.py", "if a.ndim != 4 or a.shape[1:] != b.shape[1:]:", "or → and",
             "killed: test_antigan.py::test_pairwise_ssim_edges_dark_images_clamping_and_shapes"),
    Survivor("metrics/class_ssim.py", "if min(a.shape[-2:]) < window:", "< → <=",
             "killed: test_pairwise_ssim_edges_dark_images_clamping_and_shapes (a window as large as the image)"),
    Survivor("metrics/class_ssim.py", "if min(a.shape[-2:]) < window:", "shape[-2:] → shape[+2:]",
             "equivalent (redundant): inputs are 4-D (checked above), where [2:] and [-2:] agree"),
    Survivor("metrics/class_ssim.py", "c1, c2 = k1**2, k2**2", "k1**3",
             "killed: test_pairwise_ssim_edges_dark_images_clamping_and_shapes (dark images)"),
    Survivor("metrics/class_ssim.py", "u = F.unfold(x.double().clamp(0, 1), kernel_size=window)",
             "clamp bounds dropped or 2", "killed: test_pairwise_ssim_edges_dark_images_clamping_and_shapes"),
    Survivor("metrics/class_ssim.py",
             "a: torch.Tensor, b: torch.Tensor, *, window: int = 8, chunk: int = 64, k1: float = 0.01, k2: float = 0.03",
             "chunk 65", "equivalent (redundant): the chunk only splits the rows computed"),
    Survivor("metrics/class_ssim.py", "continue", "continue → break",
             "killed: test_antigan.py::test_class_level_ssim_skips_classes_without_private_images_and_keeps_the_window"),
    Survivor("metrics/class_ssim.py",
             "scores = pairwise_ssim(generated[generated_labels == cls], mine, window=window).mean(dim=1)",
             "window= dropped", "killed: test_class_level_ssim_skips_classes_without_private_images_and_keeps_the_window"),
    # metrics/lpips.py
    Survivor("metrics/lpips.py", "nn.Conv2d(3, 64, 11, stride=4, padding=2),",
             "AlexNet/VGG channel counts, kernels, strides, paddings, pools and taps (48 mutants)",
             "killed: test_metrics.py::test_lpips_backbones_are_torchvisions_layouts"),
    Survivor("metrics/lpips.py", "for i, layer in enumerate(self.features[: self.taps[-1] + 1]):", "+ 1 → + 2",
             "equivalent (redundant): a layer after the last tap is computed and never read"),
    Survivor("metrics/lpips.py", "out.append(x / (x.pow(2).sum(dim=1, keepdim=True).sqrt() + 1e-10))",
             "+ 1e-10 → − 1e-10", "equivalent (redundant): the ε matters only where the features are all zero, "
             "and there x / ±ε is 0 either way"),
    Survivor("metrics/lpips.py", "self.lins = nn.ModuleList(nn.Conv2d(c, 1, 1, bias=False) for c in channels)",
             "bias=None", "equivalent (redundant): None is falsy, no bias either way"),
    Survivor("metrics/lpips.py", "self.net = net", "self.net = None",
             "equivalent (redundant): the attribute is informative only; nothing reads it"),
    # metrics/sensitivity.py
    Survivor("metrics/sensitivity.py", "return torch.frac(torch.sin(projection * 12.9898 + 78.233).abs() * 43758.5453)",
             "any constant changed", "equivalent (redundant): the constants of a fixed content hash; any "
             "others give an equally valid hash (determinism and seed dependence are tested)"),
    Survivor("metrics/sensitivity.py",
             "direction = torch.randn(x[0].numel(), generator=gen, dtype=torch.float64).to(x.device)",
             "x[0] → x[1]; .to(None)", "equivalent (redundant, device): every image has the same size"),
    Survivor("metrics/sensitivity.py", 'if self.rule.sensitive != "fraction" or not len(dataset):', "or → and",
             "equivalent (redundant): mask() calls threshold() for the fraction rule only"),
    Survivor("metrics/sensitivity.py", "k = max(1, round(self.rule.fraction * len(dataset)))", "max(2, …)",
             "killed: test_dcs2.py::test_sensitivity_rule_edges"),
    Survivor("metrics/sensitivity.py", "mask[max(0, n - rule.per_batch) :] = True", "max(1, …)",
             "killed: test_sensitivity_rule_edges"),
    Survivor("metrics/sensitivity.py", "return torch.ones(n, dtype=torch.bool, device=device)",
             "dtype or device dropped (and in the other masks)",
             "killed: test_sensitivity_rule_edges (bool masks); device: equivalent (device)"),
    Survivor("metrics/sensitivity.py", "threshold = self.threshold(dataset if dataset is not None else batch)",
             "always the dataset", "killed: test_sensitivity_rule_edges (the batch's own threshold)"),
    Survivor("metrics/sensitivity.py", "return self.mask(data, data)", "mask(data) / mask(data, None)",
             "equivalent (redundant): without a dataset the mask thresholds within the batch, here the same data"),
    # metrics/registry.py
    Survivor("metrics/registry.py", "return tuple(s.name for s in self._specs.values() if s.kind == kind)",
             "== → !=; tuple(None)", "killed: test_metrics.py::test_metric_kinds_select_their_metrics_and_names_are_unique"),
    Survivor("metrics/registry.py", "if spec.name in self._specs:", "in → not in; the spec stored as None",
             "killed: test_metric_kinds_select_their_metrics_and_names_are_unique (a fresh registry); "
             "the module-level METRICS: equivalent (import)"),
    Survivor("metrics/registry.py", "return spec.precision if spec is not None else default", "condition flipped",
             "killed: test_metric_kinds_select_their_metrics_and_names_are_unique"),
    Survivor("metrics/registry.py", "return isinstance(name, str) and self.find(name) is not None", "and → or",
             "killed: test_metric_kinds_select_their_metrics_and_names_are_unique"),
    # metrics/privacy.py and image.py
    Survivor("metrics/privacy.py", "if n_true == 1 and n_rec == 1:", "and → or, == → != or 2",
             "killed: test_metrics.py::test_matching_edges_one_truth_colour_images_nan_scores_and_asr_sizes"),
    Survivor("metrics/privacy.py", "rec = reconstruction.unsqueeze(1).expand(n_rec, n_true, *truth.shape[1:]).flatten(0, 1)",
             "unsqueeze(2)", "killed: test_matching_edges_… (colour images, two truths)"),
    Survivor("metrics/privacy.py", "cost = np.nan_to_num(cost, nan=1e12, posinf=1e12, neginf=-1e12)", "nan= dropped",
             "killed: test_matching_edges_… (a NaN reconstruction against one of negative SSIM)"),
    Survivor("metrics/privacy.py", "cost = np.nan_to_num(cost, nan=1e12, posinf=1e12, neginf=-1e12)",
             "posinf/neginf dropped, flipped or 1e12 + 1",
             "equivalent (redundant): the scores are bounded (SSIM in [−1, 1], PSNR capped at 100 dB, MSE "
             "finite), so no cost is infinite; 1e12 vs 1e12 + 1 orders nothing differently"),
    Survivor("metrics/privacy.py", 'reconstruction: torch.Tensor, truth: torch.Tensor, metric: str = "ssim"',
             "another default", "killed: test_matching_edges_… (the default is SSIM)"),
    Survivor("metrics/privacy.py", "if ssim_values.numel() == 0:", "== 1", "killed: test_matching_edges_… (ASR of one value)"),
    Survivor("metrics/privacy.py", 'return float("nan")', '"NAN"', "equivalent (redundant): the same float"),
    Survivor("metrics/image.py", "return float(finite.mean()) if finite.numel() else math.nan", "always the mean",
             "equivalent (redundant): the mean of an empty tensor is NaN too"),
    Survivor("metrics/image.py", "if a.shape != b.shape or a.ndim != 4:", "or → and",
             "killed: test_metrics.py::test_image_metric_edges_clamping_range_size_and_shape"),
    Survivor("metrics/image.py", "err = (a.clamp(0, 1) - b.clamp(0, 1)).pow(2).flatten(1).mean(dim=1)",
             "clamp bounds dropped or 2", "killed: test_image_metric_edges_clamping_range_size_and_shape"),
    Survivor("metrics/image.py", "a, b = a.clamp(0, data_range), b.clamp(0, data_range)", "clamp bounds dropped",
             "killed: test_image_metric_edges_clamping_range_size_and_shape"),
    Survivor("metrics/image.py", "if min(h, w) < SSIM_WINDOW:", "< → <=",
             "killed: test_image_metric_edges_… (an 11-pixel image)"),
    Survivor("metrics/image.py", "c1, c2 = (k1 * data_range) ** 2, (k2 * data_range) ** 2", "* → /",
             "killed: test_image_metric_edges_… (dark images at data range 2)"),
    Survivor("metrics/image.py", "kernel_h = g.view(1, 1, SSIM_WINDOW, 1).expand(c, 1, SSIM_WINDOW, 1)",
             "a leading 1 dropped from view (and in kernel_w)", "equivalent (redundant): expand adds it back"),
    Survivor("metrics/image.py", "g = gaussian_window().to(a.device)", ".to(None)", "equivalent (device)"),
    Survivor("metrics/registry.py", "if name.endswith(suffix) and name.removesuffix(suffix) in self._specs:",
             "removeprefix, not in, or, None", "killed: test_metric_kinds_… (a derived column's precision, ssim_max)"),
    Survivor("metrics/registry.py", "raise UnknownNameError(f\"unknown metric {name!r}; allowed: {', '.join(self._specs)}\")",
             "the text", "equivalent (message)"),
    # leaderboard/ranking.py
    Survivor("leaderboard/ordering.py", "if a.strongest is None or b.strongest is None or a.accuracy is None or b.accuracy is None:",
             "or → and, is → is not", "killed: test_leaderboard.py::test_pareto_front_and_ranks_by_hand"),
    Survivor("leaderboard/ordering.py",
             "return pa <= pb and a.accuracy >= b.accuracy and (pa < pb or a.accuracy > b.accuracy)",
             "the first >= → >", "killed: test_pareto_front_and_ranks_by_hand (as accurate, more private)"),
    Survivor("leaderboard/ranking.py", "return sum(values) / len(values) if values else None", "/ → *",
             "killed: test_leaderboard.py::test_standings_average_seeds_and_tolerate_missing_utility"),
    Survivor("leaderboard/ranking.py", '"psnr": sum(psnrs) / len(psnrs) if psnrs else None,', "/ → *",
             "killed: test_standings_average_seeds_and_tolerate_missing_utility (two reported seeds)"),
    Survivor("leaderboard/ranking.py", "util = utility.get((model, defense), {})", "default None",
             "killed: test_standings_average_seeds_and_tolerate_missing_utility (a defense without utility)"),
    Survivor("leaderboard/ordering.py",
             "return (*privacy(row), -(row.accuracy if row.accuracy is not None else -1.0), row.defense)", "+1.0",
             "killed: test_standings_… (tied rows: the one with an accuracy first); −2.0: equivalent (still last)"),
    Survivor("leaderboard/ranking.py", 'if r.kind == "utility" and r.status == "ok" and r.model and r.defense:',
             "and → or", "killed: test_standings_… (a failed utility cell)"),
    Survivor("leaderboard/ranking.py",
             'if r.kind != "attack" or r.status != "ok" or r.model is None or r.defense is None or r.attack is None:',
             "or → and", "killed: test_standings_… (cells without a model or an attack)"),
    Survivor("leaderboard/ranking.py", 'accuracies = util.get("accuracy", [])', "default None",
             "equivalent (redundant): the next line treats None like an empty list (no estimate)"),
    Survivor("leaderboard/ranking.py", """failed[(r.model, r.defense)].append(f"{r.kind}:{r.attack or '-'}@{r.round}" + (""",
             "the placeholder text", "equivalent (message)"),
    # defenses/ats/policy.py
    Survivor("defenses/ats/policy.py",
             "signs = torch.randint(0, 2, (n, MAX_OPS), generator=generator, device=device).cpu() * 2 - 1",
             "± signs broken (randint(1, 2), (0, 3), * 3, / 2, + 1, − 2)",
             "killed: test_ats_library.py::test_signs_of_the_magnitudes_are_plus_or_minus_one_both_drawn; "
             "randint(2, …) (the one-bound form of randint(0, 2)) and device: equivalent"),
    Survivor("defenses/ats/policy.py", "if not 1 <= ops <= MAX_OPS:", "1 <= → 2 <=, 1 <",
             "killed: test_ats_library.py::test_random_policies_of_one_to_three_operations"),
    Survivor("defenses/ats/policy.py",
             "array = (image.detach().cpu().float().clamp(0, 1) * 255).round().to(torch.uint8).numpy()",
             "clamp bounds dropped or 2",
             "killed: test_ats_library.py::test_untransformed_images_are_clamped_quantized_and_keep_their_dtype"),
    Survivor("defenses/ats/policy.py",
             "out.append(from_pil(policy.apply_image(pil, sign) if policy is not None else pil))",
             "always a policy", "killed: test_untransformed_images_are_clamped_quantized_and_keep_their_dtype"),
    Survivor("defenses/ats/policy.py", "return torch.stack(out).to(device=x.device, dtype=x.dtype)",
             "dtype dropped; device dropped", "killed (dtype): test_untransformed_images_…; device: equivalent"),
    Survivor("defenses/ats/policy.py", 'return Image.fromarray(array[0], mode="L")', "mode dropped (and RGB)",
             "equivalent (redundant): Pillow infers L and RGB from a uint8 array's shape"),
    Survivor("defenses/ats/policy.py", "array = torch.from_numpy(np.asarray(image, dtype=np.float32) / 255.0)",
             "dtype dropped", "equivalent (redundant): apply_policies casts to the input's dtype"),
    Survivor("defenses/ats/policy.py", "for image, policy, sign in zip(x, policies, signs.tolist(), strict=True):",
             "strict dropped", "equivalent (redundant): the callers pass equal lengths (strict guards a bug)"),
    Survivor("defenses/ats/policy.py", "for op, sign in zip(self.ops, signs, strict=False):", "strict=None",
             "equivalent (redundant): None is falsy"),
    # attacks/passive/labels.py
    Survivor("attacks/passive/labels.py", "present = order[weight_grad.min(dim=1).values[order] < 0]", "< → <=",
             "killed: test_attacks.py::test_batch_label_rule_edges (a row of exact zeros)"),
    Survivor("attacks/passive/labels.py", "if len(present) == 0:", "== 0 → == 1",
             "killed: test_batch_label_rule_edges (one present class, another with the lowest sum)"),
    Survivor("attacks/passive/labels.py", "present = order[:1]", "order[:2], None", "killed: test_batch_label_rule_edges"),
    Survivor("attacks/passive/labels.py", "weight = -weight  # Δθ ≈ −lr·Σ g: the sign flips, the ranking does not",
             "sign kept; and the mode branches of resolve_labels (66 mutants)",
             "killed: test_attacks.py::test_resolve_labels_in_every_mode (checked by hand for 6 of them)"),
    Survivor("attacks/passive/labels.py", "if batch_size == 1:", "== 1 → == 2",
             "equivalent (redundant): for one image the batch rule also returns the lowest row sum"),
    Survivor("attacks/passive/labels.py",
             "candidates = [n for n, g in view.update.delta.items() if g.ndim == 2 and g.shape[0] == num_classes]",
             "== → !=", "killed: test_attacks.py::test_the_classifier_weight_is_the_last_classes_by_features_one"),
    Survivor("attacks/passive/labels.py", "pred_counts = torch.bincount(predicted.cpu(), minlength=int(truth.max()) + 1)",
             "minlength changed or dropped (and true_counts', and n = None)",
             "equivalent (redundant): counts beyond either bincount add min(x, 0) = 0, and true_counts is "
             "padded to pred_counts' length, so n is always that length"),
]  # fmt: skip


@pytest.mark.parametrize("survivor", SURVIVORS, ids=lambda s: f"{s.file}:{s.line[:40]}")
def test_each_judged_survivor_names_a_line_of_the_source(survivor):
    lines = {line.strip() for line in (SRC / survivor.file).read_text().splitlines()}
    assert survivor.line in lines, f"{survivor.file}: the line changed; judge its mutants again"
    assert survivor.fate.startswith(("killed", "equivalent")) and survivor.mutations
