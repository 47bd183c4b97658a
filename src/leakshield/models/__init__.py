"""Models (registry): lenet, lenet4, convnet, resnet20, resnet18, mlp, vit; antigan-cnn."""

from leakshield.models import convnet, lenet, mlp, resnet, small_cnn, vit  # noqa: F401  (register models)
from leakshield.models.base import FeatureClassifier
from leakshield.models.registry import MODELS, create_model, list_models

__all__ = ["MODELS", "FeatureClassifier", "create_model", "list_models"]
