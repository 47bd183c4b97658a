"""The text track's optional dependencies (``pip install 'leakshield[text]'``): imported when first
needed, with one line naming the extra when missing."""

from __future__ import annotations

import importlib
from typing import Any

from leakshield.errors import LeakshieldError


def text_extra(module: str) -> Any:
    """``module`` of the text extra (tokenizers, transformers, rouge_score), imported."""
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise LeakshieldError("the text track needs its extra: pip install 'leakshield[text]'") from exc
