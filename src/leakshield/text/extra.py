"""The text track's optional dependencies (``pip install 'leakshield[text]'``): imported when first
needed, with one line naming the extra when missing."""

from __future__ import annotations

import importlib
import importlib.util
from typing import Any

from leakshield.errors import LeakshieldError

#: the modules of the ``text`` extra
EXTRA_MODULES = ("tokenizers", "transformers", "rouge_score", "peft")


def text_extra(module: str) -> Any:
    """``module`` of the text extra (tokenizers, transformers, rouge_score, peft), imported."""
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise LeakshieldError("the text track needs its extra: pip install 'leakshield[text]'") from exc


def missing_text_extra() -> list[str]:
    """The modules of the text extra that are not installed (empty: all are)."""
    return [m for m in EXTRA_MODULES if importlib.util.find_spec(m) is None]
