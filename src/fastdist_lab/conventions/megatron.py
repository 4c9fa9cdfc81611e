"""Megatron-Core's rank numbering: ``RankGenerator(tp, ep, dp, pp, cp, order)`` and its masked groups.

Facts implemented (read from ``megatron/core/parallel_state.py``, rewritten here):

* ``order`` is a "-"-separated list of the tokens ``tp``, ``cp``, ``ep``, ``dp``, ``pp``; the FIRST token varies
  fastest: global rank = sum(coordinate_i * stride_i), stride_i = product of the sizes of the earlier tokens.
  A token missing from ``order`` must have size 1 and is appended at the end (Megatron raises otherwise).
* ``get_ranks(token)`` (here ``groups(token)``) masks the axes named in ``token`` (e.g. ``"dp-cp"``); the token's
  own order does not matter. Inside a group the members run over the masked axes in ORDER-STRING order, first
  fastest; the groups are enumerated over the unmasked axes, first fastest.
* Expert parallelism: Megatron-Core (since the MoE refactor, core 0.10 era) never puts ``ep`` and ``cp`` > 1 in one
  generator. ``initialize_model_parallel`` builds a decoder generator with ``ep=1`` (tp, cp, dp, pp) and an expert
  generator with ``cp=1``, ``tp=expert_tensor_parallel_size``, ``ep=expert_model_parallel_size`` and
  ``dp=world/(etp*ep*pp)`` over the same order string. ``Megatron(...)`` is one generator (it refuses ep > 1 with
  cp > 1 exactly like Megatron); ``MegatronParallelState(...).expert`` is the expert one. Older releases that folded ep
  into dp inside one generator are not modelled.
* ``get_ranks`` tokens are lower-case (Megatron raises ``ValueError`` for ``"TP"``; so does this class); a token
  repeated in ``order`` is refused (Megatron would accept it and build broken strides).
* ``MegatronParallelState(world_size, ...)`` (``megatron_state``) is the whole ``initialize_model_parallel``: both
  generators, its refusals with its reasons and every group it names; ``MegatronParallelState.from_args(...)`` reads
  a Megatron-LM command line into one (``megatron_args``).
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Any

import numpy as np

from ..errors import ConventionError
from ..layout import DIM_AXES
from ..validation import check_int
from .base import Convention
from .equivalence import compare_groups
from .project import LayoutConvention

if TYPE_CHECKING:
    import pandas as pd

MEGATRON_TOKENS: tuple[str, ...] = ("tp", "pp", "dp", "ep", "cp")
"""Megatron's parallelism tokens, in the order its RankGenerator appends the missing ones."""

DEFAULT_ORDER = "tp-cp-ep-dp-pp"
"""Megatron-Core's default ``order``."""

MEGATRON_GROUPS: dict[str, str] = {
    "TENSOR_MODEL_PARALLEL_GROUP": "tp",
    "PIPELINE_MODEL_PARALLEL_GROUP": "pp",
    "DATA_PARALLEL_GROUP": "dp",
    "CONTEXT_PARALLEL_GROUP": "cp",
    "DATA_PARALLEL_GROUP_WITH_CP": "dp-cp",
    "MODEL_PARALLEL_GROUP": "tp-pp",
    "TENSOR_AND_CONTEXT_PARALLEL_GROUP": "tp-cp",
    "TENSOR_AND_DATA_PARALLEL_GROUP": "tp-dp",
    "TENSOR_AND_DATA_PARALLEL_GROUP_WITH_CP": "tp-dp-cp",
}
"""The decoder groups ``initialize_model_parallel`` builds, by Megatron's name, with their token."""

LAYOUT_DIM_TOKENS: dict[str, str] = {
    "world": "tp-cp-dp-pp",
    "data": "dp-cp",
    "pipeline": "pp",
    "tensor": "tp",
    "sequence_data": "cp",
    "batch_data": "dp",
    "tensor_and_sequence_data": "tp-cp",
    "tensor_and_data": "tp-dp-cp",
    "model_and_sequence_data": "tp-cp-pp",
}
"""This project's nine dims as Megatron tokens (sequence-data = cp, batch-data = dp)."""

LAYOUT_TO_MEGATRON: dict[str, str] = {"tensor": "tp", "sequence_data": "cp", "batch_data": "dp", "pipeline": "pp"}
"""Axis mapping this project -> Megatron: cp stands for sequence-data, dp for batch-data."""


check_size = functools.partial(check_int, minimum=1, error=ConventionError)
"""``check_size(name, value)``: ``value`` as an int >= 1, else ``ConventionError`` naming ``name``."""


def embedding_groups(pipeline_groups: np.ndarray) -> np.ndarray:
    """Megatron's default ``EMBEDDING_GROUP`` of each pipeline group: its first and last stage (the first alone
    when the pipeline has one stage), as ``default_embedding_ranks`` picks them."""
    if pipeline_groups.shape[1] == 1:
        return pipeline_groups[:, :1]
    return pipeline_groups[:, [0, -1]]


def position_embedding_groups(pipeline_groups: np.ndarray) -> np.ndarray:
    """Megatron's default ``POSITION_EMBEDDING_GROUP`` of each pipeline group: its first stage."""
    return pipeline_groups[:, :1]


class Megatron(Convention):
    """Megatron-Core's ``RankGenerator``: ``Megatron(tp, pp, dp, cp=1, ep=1, order="tp-cp-ep-dp-pp")``.

    ``groups("dp-cp")`` returns the groups ``RankGenerator.get_ranks("dp-cp")`` returns, in the same order and
    with each group's members in the same order (one row per group). The deprecated ``Megatron.from_args`` and
    ``Megatron.expert`` (one release) are attached by ``megatron_state``, since they build a ``MegatronParallelState``.
    """

    def __init__(self, tp: int = 1, pp: int = 1, dp: int = 1, cp: int = 1, ep: int = 1, order: str = DEFAULT_ORDER):
        sizes = {
            name: check_size(name, size) for name, size in zip(("tp", "pp", "dp", "ep", "cp"), (tp, pp, dp, ep, cp))
        }
        if sizes["ep"] > 1 and sizes["cp"] > 1:
            raise ConventionError(
                f"ep={ep} and cp={cp}: Megatron-Core's RankGenerator does not allow both > 1 in one generator "
                "(cp lives in the decoder generator, ep in the expert one; see MegatronParallelState(...).expert)"
            )
        if not isinstance(order, str):
            raise ConventionError(f"order={order!r} must be a string such as 'tp-cp-ep-dp-pp'")
        tokens = order.lower().split("-")  # Megatron lower-cases the order string too
        bad = [t for t in tokens if t not in MEGATRON_TOKENS]
        if bad:
            raise ConventionError(f"order={order!r}: unknown token(s) {bad}; use {'-'.join(MEGATRON_TOKENS)}")
        repeated = sorted({t for t in tokens if tokens.count(t) > 1})
        if repeated:
            raise ConventionError(
                f"order={order!r} names {', '.join(repeated)} twice; Megatron-Core's RankGenerator would accept it "
                "and build broken strides (the repeated axis counted twice, groups with ranks beyond the world), "
                "so it is refused here"
            )
        for token in MEGATRON_TOKENS:
            if token not in tokens:
                if sizes[token] != 1:
                    raise ConventionError(f"{token}={sizes[token]} but order={order!r} does not name {token}")
                tokens.append(token)
        self.tp, self.pp, self.dp, self.cp, self.ep = (sizes[t] for t in ("tp", "pp", "dp", "cp", "ep"))
        self.order = "-".join(tokens)
        super().__init__(tokens, [sizes[t] for t in tokens], name=f"Megatron {order.lower()}")

    # ------------------------------------------------------------------ Megatron's API
    def expand(self, spec: str | Any) -> set[str]:
        """The axes a token like ``"dp-cp"`` (or a sequence of tokens) masks; members follow the order string."""
        items = [spec] if isinstance(spec, str) else list(spec)
        parts = [part for item in items for part in str(item).split("-")]
        upper = [part for part in parts if part != part.lower() and part.lower() in MEGATRON_TOKENS]
        if upper:
            raise ConventionError(
                f"token {spec!r}: Megatron's get_ranks takes lower-case tokens only "
                f"({upper[0]!r} raises ValueError: '{upper[0]}' is not in list); use {upper[0].lower()!r}"
            )
        return super().expand(parts)

    def get_ranks(self, token: str) -> list[list[int]]:
        """``groups(token)`` as nested lists, exactly what Megatron's ``RankGenerator.get_ranks`` returns."""
        return self.groups(token).tolist()

    def named_groups(self) -> dict[str, np.ndarray]:
        """The decoder groups ``initialize_model_parallel`` builds, keyed by Megatron's group name, with the
        embedding and position-embedding groups (Megatron's defaults) and the distributed-optimizer-instance group
        (the whole world with one instance). ``MegatronParallelState.named_groups`` adds the expert groups."""
        out = {name: self.groups(token) for name, token in MEGATRON_GROUPS.items()}
        out["EMBEDDING_GROUP"] = embedding_groups(out["PIPELINE_MODEL_PARALLEL_GROUP"])
        out["POSITION_EMBEDDING_GROUP"] = position_embedding_groups(out["PIPELINE_MODEL_PARALLEL_GROUP"])
        out["INTRA_DISTRIBUTED_OPTIMIZER_INSTANCE_GROUP"] = np.arange(self.world_size, dtype=np.int64)[None, :]
        return out

    @classmethod
    def from_layout(cls, layout: Any) -> Megatron:
        """The Megatron generator that numbers GPUs like ``layout``: cp = sequence-data, dp = batch-data, and
        order ``tp-cp-dp-pp`` (data-first) or ``tp-pp-cp-dp`` (pipeline-first)."""
        order = "tp-pp-cp-dp" if layout.pipeline_first else "tp-cp-dp-pp"
        return cls(
            tp=layout.tensor_parallel,
            pp=layout.pipeline_parallel,
            dp=layout.batch_data_parallel,
            cp=layout.sequence_data_parallel,
            order=order,
        )

    def default_mapping_from(self, other: Convention) -> dict[str, str] | None:
        """The axis mapping from this project's layout convention to Megatron (else ``None``)."""
        if isinstance(other, LayoutConvention):
            return dict(LAYOUT_TO_MEGATRON)
        return None

    def __repr__(self) -> str:
        return (
            f"Megatron(tp={self.tp}, pp={self.pp}, dp={self.dp}, cp={self.cp}, ep={self.ep}, "
            f"order={self.order!r}; world {self.world_size})"
        )


def megatron_dim_table(layout: Any, megatron: Megatron | None = None) -> pd.DataFrame:
    """For each of this project's nine dims: the Megatron token, Megatron's group name, and whether the
    groups (members in order) are the same as under ``megatron`` (default ``Megatron.from_layout(layout)``)."""
    import pandas as pd

    ours = LayoutConvention(layout)
    theirs = megatron if megatron is not None else Megatron.from_layout(layout)
    token_names = {token: name for name, token in MEGATRON_GROUPS.items()}
    rows = []
    for dim, token in LAYOUT_DIM_TOKENS.items():
        result = compare_groups(ours, DIM_AXES[dim], theirs, token.split("-"))
        difference = "" if result.difference is None else result.difference.describe()
        rows.append((dim, token, token_names.get(token, ""), ours.groups(dim).shape[1], result.same, difference))
    columns = ["dim", "megatron_token", "megatron_group", "group_size", "same", "first_difference"]
    return pd.DataFrame(rows, columns=columns).set_index("dim")
