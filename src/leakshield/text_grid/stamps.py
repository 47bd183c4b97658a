"""Per-cell provenance of a text grid, as :mod:`leakshield.experiment.stamps` gives the image grid's: a
text cell runs through the shared core (from :mod:`leakshield.text_grid.cells`: the corpus, tokenizer,
federation, training, victims and the ROUGE scores, with the config's shared sections as settings), its
model, its defense setting and its attack (its own module in :mod:`leakshield.text_grid.attacks` and what
that reaches). An edit to DAGER therefore stales the cells DAGER computed, and every cell that reaches
its code (TAG and LAMP read a LoRA model's length through DAGER's token check), and no other; a
parameter's new default stales its attack's cells, because the default lives in that attack's module.

The corpus's content is not stamped (a run directory refuses another corpus by its fingerprint), so
``leakshield leaderboard --check`` judges text cells without the corpus at hand."""

from __future__ import annotations

from leakshield.code_graph import CodeGraph
from leakshield.experiment.stamps import ComponentCode, ComponentStamper
from leakshield.text_grid.attacks import TEXT_ATTACKS
from leakshield.text_grid.cells import TextCell, expand_text_grid
from leakshield.text_grid.config import TextExperimentConfig

#: where every text cell's computation starts (its closure is the text grid's shared core)
TEXT_CORE_ROOTS = ("leakshield.text_grid.cells",)
#: the modules that build a text model from its spec (reached by the core too; named for the model)
TEXT_MODEL_ROOTS = ("leakshield.text.models", "leakshield.text.lora", "leakshield.text.backbone")
#: config sections that are grid axes or do not compute (they never stale a computed cell)
TEXT_NOT_SETTINGS = {"track", "name", "seeds", "models", "defenses", "attacks", "states"}


class TextStamper(ComponentStamper):
    """The components of the cells of one text ``config``: the shared core, the model, the defense
    setting and the attack (each cell's stamps are stored in its ``environment``)."""

    def __init__(self, config: TextExperimentConfig, graph: CodeGraph | None = None) -> None:
        super().__init__(graph)
        self.config = config
        # defaults left out, as for image grids: a config written out in full stamps as the one it came from
        shared = config.model_dump(mode="json", exclude_defaults=True, exclude=TEXT_NOT_SETTINGS)
        # where the corpus file is computes nothing; the batch sizes are an axis (``corpus: {path: …}``
        # alone stamps as no corpus)
        self._shared = self._settings(shared, {"corpus": "path", "victims": "batches"})

    def components(self, cell: TextCell) -> dict[str, ComponentCode]:
        """Every component ``cell`` runs through, by kind."""
        model, attack = cell.model, cell.attack
        spec = model.model_dump(mode="json", exclude_defaults=True, exclude={"label"})
        return {
            "core": self._component("core", "core", list(TEXT_CORE_ROOTS), self._shared),
            "model": self._component("model", model.display, list(TEXT_MODEL_ROOTS), spec),
            "defense": self._defense(cell.defense),
            "attack": self._registered(
                "attack", attack.display, TEXT_ATTACKS, attack.name, {"name": attack.name, **attack.params}
            ),
        }


def text_cells(config: TextExperimentConfig) -> dict[str, TextCell]:
    """The cells of ``config`` by key."""
    return {cell.key: cell for cell in expand_text_grid(config)}
