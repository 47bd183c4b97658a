import pytest

from leakshield.errors import ConfigError, UnknownNameError
from leakshield.models import MODELS
from leakshield.registry import Params, Registry


def test_unknown_name_suggests_the_closest_and_lists_allowed():
    with pytest.raises(UnknownNameError) as err:
        MODELS.get("lenett")
    text = str(err.value)
    assert "did you mean 'lenet'" in text
    assert "allowed:" in text and "resnet18" in text


def test_alias_implies_parameters():
    entry, implied = MODELS.resolve("dmlp")
    assert entry.name == "mlp" and implied == {"hidden_layers": 4}
    assert MODELS.validate("dmlp").hidden_layers == 4


def test_validation_error_names_the_field():
    with pytest.raises(ConfigError, match=r"convnet: width: Input should be greater than or equal to 1"):
        MODELS.validate("convnet", {"width": 0})
    with pytest.raises(ConfigError, match=r"depth: unknown field"):
        MODELS.validate("convnet", {"depth": 3})


def test_registering_twice_is_an_error():
    reg: Registry[object] = Registry("thing")

    @reg.register("a", summary="first", params=Params)
    def make_a(params):
        return object()

    with pytest.raises(ValueError, match="registered twice"):
        reg.register("a", summary="again")(make_a)
