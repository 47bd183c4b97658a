"""DAGER (Petrov et al., NeurIPS 2024) in a text grid: exact recovery by span checks."""

from __future__ import annotations

import pydantic

from leakshield.registry import Params
from leakshield.text.dager import dager_attack
from leakshield.text.dager_lora import lora_dager_attack
from leakshield.text.lora import AdapterClassifier
from leakshield.text_grid.attacks.base import TEXT_ATTACKS, TextAttack, TextAttackInput, TextAttackOutput
from leakshield.threats import Adversary, Knowledge, Threat


class DagerParams(Params):
    """Tolerances of the span checks (distance of a unit state to the span, 0 … 1) and the search's
    bounds; defaults as measured in :mod:`leakshield.text.dager`."""

    token_tolerance: float = pydantic.Field(default=1e-2, gt=0, lt=1, description="first-layer span check")
    sequence_tolerance: float = pydantic.Field(default=1.5e-4, gt=0, lt=1, description="context span check")
    rank_tolerance: float = pydantic.Field(
        default=1e-7, gt=0, lt=1, description="singular values below this share of the largest are rounding"
    )
    max_prefixes: int = pydantic.Field(default=256, ge=1, description="decoder prefixes kept per position")
    max_combinations: int = pydantic.Field(
        default=5000, ge=1, description="encoder combinations scored per length (sampled beyond)"
    )
    embedding_step: bool = pydantic.Field(
        default=True,
        description="under the defense's known rounding or noise, read one sequence's tokens off the "
        "embedding gradients (the span check cannot see through them)",
    )
    fill_in: bool = pydantic.Field(
        default=True,
        description="where fewer sequences pass than the batch holds, fill it with the best failing ones "
        "as the reference does (leakshield.text.dager_fill)",
    )


@TEXT_ATTACKS.register(
    "dager",
    summary="DAGER: exact recovery by span checks on the first attention layer's gradient (b·n < d − 1)",
    reference="Petrov et al., DAGER: Exact Gradient Inversion for Large Language Models, NeurIPS 2024",
    params=DagerParams,
    threat=Threat(Adversary.OBSERVING_SERVER, frozenset({Knowledge.PROTOCOL, Knowledge.DEFENSES})),
)
class DagerTextAttack(TextAttack):
    """DAGER (:func:`~leakshield.text.dager.dager_attack`); no labels, no optimisation."""

    params: DagerParams

    def __call__(self, given: TextAttackInput) -> TextAttackOutput:
        p = self.params
        if isinstance(given.model, AdapterClassifier):
            # the adapters' own tolerance defaults (dager_lora's docstring) unless the config sets them
            chosen = {k: getattr(p, k) for k in p.model_fields_set & {"token_tolerance", "rank_tolerance"}}
            result = lora_dager_attack(given.model, given.gradient, given.batch,
                                       sequence_tolerance=p.sequence_tolerance, max_prefixes=p.max_prefixes,
                                       max_combinations=p.max_combinations, noise_std=given.noise_std,
                                       seed=given.seed, **chosen)  # fmt: skip
            return TextAttackOutput(ids=result.ids)
        result = dager_attack(given.model, given.gradient, given.batch, token_tolerance=p.token_tolerance,
                              sequence_tolerance=p.sequence_tolerance, rank_tolerance=p.rank_tolerance,
                              max_prefixes=p.max_prefixes, max_combinations=p.max_combinations,
                              noise_std=given.noise_std, rounding=given.rounding,
                              embedding_step=p.embedding_step, fill_in=p.fill_in,
                              seed=given.seed)  # fmt: skip
        return TextAttackOutput(ids=result.ids)
