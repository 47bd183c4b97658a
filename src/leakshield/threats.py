"""Threat models as data: who attacks, what it knows, which rounds it sees, and whether secure aggregation
stops it. Every registered attack declares one :class:`Threat`; the pipeline dispatches on it, every
stored cell and report carries it, the leaderboard groups by it.

Each threat maps to the catalogue of threat models of Carletti et al. (*SoK: Gradient Inversion Attacks
in Federated Learning*, USENIX Security 2025, models A–H, also used by LeakPro), which orders the
adversary's knowledge: A sees the updates; B also knows the model (architecture and parameters); C also
the training details (local learning rate, steps, batch size); D also surrogate data (a public split);
E also statistics of the client's data (e.g. BatchNorm statistics); F manipulates the model sent (B + C
+ active manipulation); G does so with surrogate data; H also controls which clients are selected.
A participating client (the GAN attack of Hitaj et al.) lies outside that catalogue, which covers the
server and eavesdroppers: its letter is ``None`` and :meth:`Threat.catalogue_name` says so.
"""

from __future__ import annotations

import textwrap
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from enum import StrEnum
from typing import Any


class Adversary(StrEnum):
    """Who attacks."""

    #: the server only observes what it receives (honest-but-curious)
    OBSERVING_SERVER = "observing-server"
    #: the server changes the parameters of the model it sends
    PARAMETER_SERVER = "parameter-server"
    #: the server changes the architecture of the model it sends (e.g. prepends a layer)
    ARCHITECTURE_SERVER = "architecture-server"
    #: a client taking part in training with updates of its own
    PARTICIPANT = "participant"
    #: the federation's operator attacking its own clients' replies to measure them (an audit)
    AUDITOR = "auditor"


class Knowledge(StrEnum):
    """What an attack may use beyond the update and the model it was computed on."""

    #: the victims' labels (granted by the config's ``attack.threat.labels_known``)
    LABELS = "labels"
    #: the client's BatchNorm statistics (running means and variances of its batch)
    BATCHNORM = "batchnorm-statistics"
    #: the public split (surrogate data: a prior, a generator, thresholds)
    PUBLIC_SPLIT = "public-split"
    #: the defenses' public configuration (Kerckhoffs: an adaptive attack)
    DEFENSES = "defense-config"
    #: the client's protocol facts (FedSGD/FedAvg, learning rate, local steps, batch size)
    PROTOCOL = "protocol-facts"


class Rounds(StrEnum):
    """Which rounds the attacker observes."""

    ONE = "one"  # one update of the victim
    SEVERAL = "several"  # updates of the victim in consecutive rounds (the federation trains between)
    TRAINING = "training"  # every round it takes part in (a participant: the global models it receives)


#: the short answer to "to whom does it leak", per adversary
WHO = {
    Adversary.OBSERVING_SERVER: "honest-but-curious server",
    Adversary.PARAMETER_SERVER: "malicious server",
    Adversary.ARCHITECTURE_SERVER: "malicious server",
    Adversary.PARTICIPANT: "malicious client",
    Adversary.AUDITOR: "auditor",
}

#: Carletti et al.'s models A–H: letter → (name, what the adversary has beyond the updates)
CATALOGUE: dict[str, tuple[str, str]] = {
    "A": ("Eavesdropper", "the model updates only"),
    "B": ("Informed Eavesdropper", "+ basic knowledge (the model's architecture and parameters)"),
    "C": ("Parameter-Aware Eavesdropper", "+ training details (learning rate, local steps, batch size)"),
    "D": ("Data-Enhanced Eavesdropper", "+ surrogate data (a public split)"),
    "E": (
        "Statistical-Informed Eavesdropper",
        "+ the client's data distribution (e.g. BatchNorm statistics)",
    ),
    "F": ("Active Manipulator", "B + C, and it manipulates the model it sends"),
    "G": ("Data-Enhanced Manipulator", "F + surrogate data"),
    "H": ("Active Client Manipulator", "G + control of which clients are selected"),
}

ACTIVE = frozenset({Adversary.PARAMETER_SERVER, Adversary.ARCHITECTURE_SERVER})


@dataclass(frozen=True)
class Threat:
    """A declared threat model. ``adversary``: who attacks; ``knowledge``: what it may use (protocol
    facts and the defenses' public configuration are public to every server in leakshield; a declared
    threat lists them when the attack uses them); ``rounds``: which rounds it observes;
    ``secure_aggregation``: whether the attack works when secure aggregation hides single updates (the
    server sees only their sum)."""

    adversary: Adversary
    knowledge: frozenset[Knowledge] = field(default_factory=lambda: frozenset({Knowledge.PROTOCOL}))
    rounds: Rounds = Rounds.ONE
    secure_aggregation: bool = False

    def __post_init__(self) -> None:
        object.__setattr__(self, "adversary", Adversary(self.adversary))
        object.__setattr__(self, "knowledge", frozenset(Knowledge(k) for k in self.knowledge))
        object.__setattr__(self, "rounds", Rounds(self.rounds))

    @property
    def modifies_model(self) -> bool:
        """Whether the attacker changes the model the server sends (a malicious server)."""
        return self.adversary in ACTIVE

    @property
    def who(self) -> str:
        """To whom the attack leaks, in a practitioner's words (the leaderboard's threat column)."""
        return WHO[self.adversary]

    @property
    def catalogue(self) -> str | None:
        """Carletti et al.'s letter (A–H); None for a participating client (outside the catalogue)."""
        if self.adversary is Adversary.PARTICIPANT:
            return None
        surrogate = Knowledge.PUBLIC_SPLIT in self.knowledge
        if self.modifies_model:
            return "G" if surrogate else "F"
        if Knowledge.BATCHNORM in self.knowledge:
            return "E"
        if surrogate:
            return "D"
        if Knowledge.PROTOCOL in self.knowledge:
            return "C"
        return "B"  # every leakshield attack holds the model it attacks

    def catalogue_name(self) -> str:
        letter = self.catalogue
        if letter is None:
            return "outside A–H (a participating client)"
        return f"{letter} ({CATALOGUE[letter][0]})"

    def granting(self, *, labels_known: bool) -> Threat:
        """The threat a cell runs under: the declared one plus what the config grants (labels)."""
        if not labels_known or self.adversary is Adversary.PARTICIPANT:
            return self
        return replace(self, knowledge=self.knowledge | {Knowledge.LABELS})

    def as_json(self) -> dict[str, Any]:
        return {
            "adversary": str(self.adversary),
            "who": self.who,
            "knowledge": sorted(str(k) for k in self.knowledge),
            "rounds": str(self.rounds),
            "secure_aggregation": self.secure_aggregation,
            "catalogue": self.catalogue,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Threat:
        return cls(
            Adversary(data["adversary"]),
            frozenset(Knowledge(k) for k in data.get("knowledge", ())),
            Rounds(data.get("rounds", "one")),
            bool(data.get("secure_aggregation", False)),
        )

    def describe(self) -> str:
        """One line: who, the catalogue letter, what it knows, rounds, secure aggregation."""
        known = ", ".join(sorted(str(k) for k in self.knowledge)) or "nothing beyond the update"
        agg = "works under secure aggregation" if self.secure_aggregation else "needs single updates"
        return (
            f"{self.who} [{self.adversary}; {self.catalogue_name()}]; knows: {known}; "
            f"rounds: {self.rounds}; {agg}"
        )


def threat(
    adversary: Adversary | str,
    knowledge: Iterable[Knowledge | str] = (Knowledge.PROTOCOL,),
    *,
    rounds: Rounds | str = Rounds.ONE,
    secure_aggregation: bool = False,
) -> Threat:
    """Shorthand for a :class:`Threat` (a registry entry's ``threat=``)."""
    return Threat(
        Adversary(adversary),
        frozenset(Knowledge(k) for k in knowledge),
        Rounds(rounds),
        secure_aggregation,
    )


#: the threats of common attack families, for registrations
OBSERVER = threat(Adversary.OBSERVING_SERVER)
ADAPTIVE_OBSERVER = threat(Adversary.OBSERVING_SERVER, (Knowledge.PROTOCOL, Knowledge.DEFENSES))
#: a client in the federation: it receives the global models (which secure aggregation does not hide)
PARTICIPANT_CLIENT = threat(
    Adversary.PARTICIPANT, (Knowledge.PROTOCOL,), rounds=Rounds.TRAINING, secure_aggregation=True
)
PRIOR_OBSERVER = threat(Adversary.OBSERVING_SERVER, (Knowledge.PROTOCOL, Knowledge.PUBLIC_SPLIT))
ADAPTIVE_PRIOR_OBSERVER = threat(
    Adversary.OBSERVING_SERVER, (Knowledge.PROTOCOL, Knowledge.DEFENSES, Knowledge.PUBLIC_SPLIT)
)


def catalogue_lines(attacks: Iterable[tuple[str, Threat]]) -> list[str]:
    """``leakshield list threats``: the catalogue A–H, the adversaries leakshield models, and which
    registered attacks (name, threat) fall under each letter."""
    by_letter: dict[str | None, list[str]] = {}
    for name, declared in attacks:
        by_letter.setdefault(declared.catalogue, []).append(name)
    lines = ["Threat models (Carletti et al., SoK: Gradient Inversion Attacks in FL, USENIX Security 2025):"]
    for letter, (title, has) in CATALOGUE.items():
        lines.append(f"  {letter}  {title:<34} {has}")
        if by_letter.get(letter):
            names = ", ".join(sorted(by_letter[letter]))
            lines += textwrap.wrap(
                names,
                100,
                break_on_hyphens=False,
                initial_indent="     attacks: ",
                subsequent_indent=" " * 14,
            )
    if by_letter.get(None):
        lines.append("  —  outside A–H: a participating client (it receives the global models, trains with")
        lines.append(f"     updates of its own): {', '.join(sorted(by_letter[None]))}")
    lines.append("Adversaries: " + "; ".join(f"{a} ({WHO[a]})" for a in Adversary))
    lines.append("Knowledge: " + ", ".join(str(k) for k in Knowledge) + ". Rounds: " +
                 ", ".join(str(r) for r in Rounds) + ".")  # fmt: skip
    lines.append("A cell's threat is its attack's declared one plus what the config grants (labels: "
                 "attack.threat.labels_known); 'leakshield list attacks -v' shows each.")  # fmt: skip
    return lines
