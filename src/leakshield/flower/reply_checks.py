"""Which Flower replies a round can aggregate: a reply is sound when it holds one ArrayRecord (named as
the one sent, where that is known) whose arrays are those sent to its node — the same keys, shapes and
dtypes — with finite values, and one MetricRecord with a finite, positive sample count no larger than
a client can hold; and when its records are named and keyed as the round's other sound replies.
Anything else would stop a strategy (FedAvg's consistency checks raise) or poison the aggregate (a NaN
array, a NaN weight, a weight of 1e308 that alone becomes the global model)."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import torch
from flwr.app import Message

from leakshield.flower.records import state_of

#: the sample count FedAvg weighs replies by (``FedAvg.weighted_by_key``'s default)
WEIGHT_KEY = "num-examples"


def _one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split())[:300] or type(exc).__name__


#: the largest sample count a reply may claim where the federation's clients are not known (2³¹ − 1:
#: more than any client holds; a claim of 1e308 would alone outweigh every other reply)
MAX_EXAMPLES = 2**31 - 1


def reply_problem(
    reply: Message,
    sent: Mapping[str, torch.Tensor] | None,
    name: str | None,
    weight_key: str = WEIGHT_KEY,
    most: float = MAX_EXAMPLES,
) -> tuple[str | None, dict[str, torch.Tensor] | None]:
    """(why ``reply`` cannot be aggregated or None, its arrays as a state dict when they could be read);
    ``sent``/``name``: the arrays and the record name sent to its node (None: nothing was sent);
    ``most``: the largest sample count a client can hold (a larger claim would outweigh honest replies)."""
    if sent is None:
        return "a reply to nothing sent to its node this round", None
    arrays, metrics = reply.content.array_records, reply.content.metric_records
    if len(arrays) != 1:
        return f"expected one ArrayRecord, got {len(arrays)}", None
    if name is not None and name not in arrays:
        return f"its ArrayRecord is named {next(iter(arrays))!r}, the one sent {name!r}", None
    if len(metrics) != 1:
        return f"expected one MetricRecord, got {len(metrics)}", None
    count = next(iter(metrics.values())).get(weight_key)
    number = isinstance(count, int | float) and not isinstance(count, bool)
    if not number or not math.isfinite(count) or count <= 0:  # type: ignore[arg-type]
        return f"its {weight_key!r} is {count!r}, not a finite positive number", None
    if count > most:  # type: ignore[operator]
        return f"its {weight_key!r} is {count!r}, more than a client can hold ({most:,.0f} at most)", None
    try:
        state = state_of(next(iter(arrays.values())))
    except Exception as exc:  # whatever bytes a reply holds, reading them must not stop the round
        return f"its arrays cannot be read ({_one_line(exc)})", None
    differ = sorted(set(sent) ^ set(state))
    if differ:
        return f"its arrays' keys differ from those sent: {differ[:3]}", state
    for key, value in state.items():
        if value.shape != sent[key].shape or value.dtype != sent[key].dtype:
            return (f"{key!r} is {value.dtype} {tuple(value.shape)}, the model sent has {sent[key].dtype} "
                    f"{tuple(sent[key].shape)}"), state  # fmt: skip
        if (value.is_floating_point() or value.is_complex()) and not bool(value.isfinite().all()):
            return f"{key!r} holds a non-finite value", state
    return None, state


def layout(reply: Message) -> tuple[str, str, frozenset[str]]:
    """The record names and metric keys a strategy requires equal across the replies it aggregates."""
    arrays, metrics = reply.content.array_records, reply.content.metric_records
    metric_name = next(iter(metrics))
    return next(iter(arrays)), metric_name, frozenset(metrics[metric_name].keys())


def inconsistent(replies: Sequence[Message]) -> list[tuple[int, str]]:
    """(index, why) of the sound replies laid out otherwise than the first of them."""
    if not replies:
        return []
    first = layout(replies[0])
    return [(i, f"its records {layout(r)} are laid out otherwise than the round's first reply's {first}")
            for i, r in enumerate(replies[1:], start=1) if layout(r) != first]  # fmt: skip
