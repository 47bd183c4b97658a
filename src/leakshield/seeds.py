"""Every seed formula of a run in one place: how a cell's seed becomes the randomness of its victims'
clients, its attacks' starts and an audit's draws. Changing one changes stored numbers."""

from __future__ import annotations

import torch

#: multiplier separating the attack seeds of two cell seeds (victim k of cell seed s: s·M + k)
CELL_STRIDE = 100_003
#: multiplier separating audited rounds (audit of round r, client c: s·CELL_STRIDE + r·ROUND_STRIDE + c)
ROUND_STRIDE = 1_009
#: the key of a victim client's per-round stream in an attack cell
VICTIM_STREAM = 17


def mix(*keys: int) -> int:
    """A seed that is a deterministic function of ``keys`` (e.g. seed, round, client)."""
    value = 0
    for key in keys:
        value = (value * 1_000_003 + int(key) + 1) % (2**63 - 1)
    return value


def seeded_generator(*keys: int, device: torch.device | str = "cpu") -> torch.Generator:
    """A generator seeded with :func:`mix` of ``keys``."""
    return torch.Generator(device=device).manual_seed(mix(*keys))


#: the key of the per-seed victim draw (``victims.per_seed``)
VICTIM_DRAW_STREAM = 29


def victim_draw_seed(victim_seed: int, cell_seed: int) -> int:
    """The seed of the victim draw of cell seed ``cell_seed`` when victims are drawn per seed."""
    return mix(VICTIM_DRAW_STREAM, victim_seed, cell_seed)


def victim_attack_seed(cell_seed: int, victim: int) -> int:
    """The attack's seed (its starting images) for victim ``victim`` of a cell."""
    return cell_seed * CELL_STRIDE + victim


def audit_attack_seed(seed: int, round: int, client: int) -> int:
    """The attack's seed for client ``client``'s reply audited in ``round``."""
    return seed * CELL_STRIDE + round * ROUND_STRIDE + client


def victim_round_generator(
    cell_seed: int, victim: int, observed: int, device: torch.device | str = "cpu"
) -> torch.Generator:
    """The victim client's randomness in its ``observed``-th observed round of an attack cell."""
    return seeded_generator(cell_seed, VICTIM_STREAM, victim, observed, device=device)


#: the key of the other clients of a victim's secure aggregate (who they are, their batches, dropouts)
AGGREGATE_STREAM = 23
#: the key of the server's own randomness (central DP's noise on the aggregate)
SERVER_NOISE_STREAM = 0x5E7E4


def server_generator(seed: int, round: int, device: torch.device | str = "cpu") -> torch.Generator:
    """The server's randomness in ``round`` of a federation seeded ``seed`` (central DP's noise)."""
    return seeded_generator(seed, SERVER_NOISE_STREAM, round, device=device)


def aggregate_draw_seed(cell_seed: int, victim: int) -> int:
    """The seed that picks the other clients of victim ``victim``'s aggregate, their batches and who
    drops out."""
    return mix(cell_seed, AGGREGATE_STREAM, victim)


def aggregate_member_generator(
    cell_seed: int, victim: int, observed: int, client: int, device: torch.device | str = "cpu"
) -> torch.Generator:
    """Another client's randomness in the ``observed``-th observed round of victim ``victim``'s aggregate."""
    return seeded_generator(cell_seed, AGGREGATE_STREAM, victim, observed, client, device=device)
