"""The audit's membership risk: the membership game of ``leakshield membership`` (FedMIA, the loss
threshold and the gradient attacks; each row's strongest attack chosen on half the clients and measured
on the other half, TPR at 1 % FPR over seeds against no defense) run on the user's model, data and
local training, for no defense and the federation's own defenses."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pydantic

from leakshield.errors import ConfigError
from leakshield.membership.config import MembershipConfig, MembershipRow
from leakshield.membership.grid import run_grid
from leakshield.membership.report import tables, write
from leakshield.membership.section import Standing

#: the membership game's folder inside the audit's
FOLDER = "membership"


class MembershipSection(pydantic.BaseModel):
    """run: play the membership game (false: leave membership risk out of the report). clients: how many
    clients hold a pool of ``records_per_client`` records, half of them members (at least 4: the
    attack is chosen on half the clients and measured on the other half). rounds: FL rounds (None: the
    audit's ``rounds``)."""

    model_config = pydantic.ConfigDict(extra="forbid", allow_inf_nan=False)
    run: bool = True
    clients: int = pydantic.Field(default=8, ge=4, le=1000)
    records_per_client: int = pydantic.Field(default=20, ge=2, le=100_000)
    rounds: int | None = pydantic.Field(default=None, ge=1, le=10_000)


def membership_config(audit: Any, train_size: int) -> MembershipConfig | None:
    """The membership game of ``audit`` (an :class:`~leakshield.model_audit.config.AuditConfig`), or
    None when it is turned off; one line when the training split cannot hold its pools. Its rows: no
    defense, and the federation as it runs (``yours``: its defenses, under secure aggregation when it
    runs it — then the server sees only the round's sum, and only the global-model attacks apply)."""
    section: MembershipSection = audit.membership
    if not section.run:
        return None
    needed = section.clients * section.records_per_client
    if needed > train_size:
        raise ConfigError(
            f"membership: {section.clients} clients × {section.records_per_client} records = "
            f"{needed} > the {train_size} training images; fewer clients or records_per_client, "
            "or membership: {run: false}"
        )
    rows = [MembershipRow(label="none")]
    stack, secure = audit.own_stack(), audit.federation.secure_aggregation
    if stack or secure:  # the federation as it runs: its defenses, and the server's view of the updates
        rows.append(
            MembershipRow.model_validate({"label": "yours", "stack": stack, "secure_aggregation": secure})
        )
    data = audit.data
    return MembershipConfig.model_validate(
        {
            "dataset": data.name,
            "dataset_params": data.params,
            "data_root": data.root,
            "model": audit.model.model_dump(mode="json", exclude_none=True, exclude={"against"}),
            "clients": section.clients,
            "records_per_client": section.records_per_client,
            "rounds": section.rounds or audit.rounds,
            "local": audit.federation.local.model_dump(mode="json"),
            "seeds": list(audit.seeds),
            "rows": [r.model_dump(mode="json") for r in rows],
        }
    )


def run_membership(
    config: MembershipConfig, out: Path, *, device: str, progress: bool
) -> tuple[dict[str, tuple[list[Standing], bool]], int, int]:
    """Play (or reuse, kept per row and seed) the game into ``out/membership``, write its own pages
    there; its ranked tables per threat, and the (row, seed) runs computed and reused."""
    folder = out / FOLDER
    from leakshield.experiment.world import resolve_device

    where = str(resolve_device(device))
    counts: dict[str, int] = {}
    runs = run_grid(config, folder, device=where, progress=progress, say=lambda _: None, counts=counts)
    command = f"leakshield audit {out / 'audit.yaml'} --out {out}"
    write(config, runs, folder, command)
    return tables(config, runs), counts["runs"] - counts["reused"], counts["reused"]
