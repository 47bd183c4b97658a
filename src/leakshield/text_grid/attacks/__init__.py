"""The text attacks a grid runs, registered with their parameters and declared threat models, one
module each (so that a cell's stamp reaches its own attack's code and no other): the bag of words
(:mod:`.bag_of_words`), TAG (:mod:`.tag`), DAGER (:mod:`.dager`), LAMP (:mod:`.lamp`) and the
sequence imprint (:mod:`.imprint`); what they share is in :mod:`.base`.

Each attack gets a :class:`TextAttackInput`: what the observing server holds — the model it sent, the
client's gradient (FedSGD) or its estimate from a FedAvg update, −Δθ / (lr · local steps), the batch
size, and the standard deviation of the Gaussian noise its defenses add (their parameters are public,
Kerckhoffs), and, where the threat grants them, the labels."""

from leakshield.text_grid.attacks import bag_of_words, dager, imprint, lamp, tag  # noqa: F401  (register)
from leakshield.text_grid.attacks.bag_of_words import BagOfWordsAttack, BagOfWordsParams
from leakshield.text_grid.attacks.base import (
    TEXT_ATTACKS,
    TEXT_DEFENSES,
    KnownLabels,
    TextAttack,
    TextAttackInput,
    TextAttackOutput,
    check_text_defense,
    create_text_attack,
    threat_of,
)
from leakshield.text_grid.attacks.dager import DagerParams, DagerTextAttack
from leakshield.text_grid.attacks.imprint import SequenceImprintAttack, SequenceImprintParams
from leakshield.text_grid.attacks.lamp import LampParams, LampTextAttack
from leakshield.text_grid.attacks.length import dummy_length
from leakshield.text_grid.attacks.tag import TagParams, TagTextAttack

__all__ = [
    "TEXT_ATTACKS",
    "TEXT_DEFENSES",
    "BagOfWordsAttack",
    "BagOfWordsParams",
    "DagerParams",
    "DagerTextAttack",
    "KnownLabels",
    "LampParams",
    "LampTextAttack",
    "SequenceImprintAttack",
    "SequenceImprintParams",
    "TagParams",
    "TagTextAttack",
    "TextAttack",
    "TextAttackInput",
    "TextAttackOutput",
    "check_text_defense",
    "create_text_attack",
    "dummy_length",
    "threat_of",
]
