"""How the model is trained: micro-batches, optimizer sharding (ZeRO), sequence tensor parallel, recompute."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from ..errors import CostError
from ..validation import check_choice, check_flag, check_int

RECOMPUTE: tuple[str, ...] = ("none", "selective", "full")
"""Activation recompute choices (Korthikanti et al. 2022, Section 5)."""


@dataclass(frozen=True)
class Training:
    """One training set-up: micro-batch, micro-batches per step, ZeRO stage, sequence tensor parallel, recompute.

    - ``micro_batch_size``: sequences per micro-batch on one data-parallel rank.
    - ``num_microbatches``: micro-batches per step and per pipeline; ``None`` means as many as the pipeline
      has stages (the fewest that fill a 1F1B pipeline; Megatron-LM's estimator assumes the same when it is
      not told).
    - ``distributed_optimizer=True`` is ZeRO stage 1 (Megatron-LM's distributed optimizer); ``zero_stage``
      0-3 chooses the stage directly (Rajbhandari et al. 2020, Figure 1: 1 shards the optimizer states,
      2 also the gradients, 3 also the weights, over the data-parallel ranks). After construction
      ``zero_stage`` is always an int and ``distributed_optimizer`` is ``zero_stage >= 1``.
    - ``sequence_tensor_parallel``: Korthikanti et al. 2022's sequence parallelism inside the tensor group
      (also on when the layout's ``sequence_tensor_parallel`` is; no effect when ``tensor_parallel == 1``).
    - ``recompute``: ``"none"``, ``"selective"`` (the attention core) or ``"full"`` (every layer keeps only
      its input).
    - ``bytes_per_weight`` / ``bytes_per_gradient`` / ``bytes_per_optimizer_state``: bytes per parameter of
      the weights (bf16: 2), the gradients (fp32: 4) and the optimizer (fp32 master weights + Adam's two
      moments: 12), the mixed-precision recipe of Megatron-LM's estimator (18 bytes per parameter).

    Bad values raise ``CostError`` naming the field.
    """

    micro_batch_size: int = 1
    num_microbatches: int | None = None
    distributed_optimizer: bool = False
    zero_stage: int | None = None
    sequence_tensor_parallel: bool = False
    recompute: str = "none"
    bytes_per_weight: int = 2
    bytes_per_gradient: int = 4
    bytes_per_optimizer_state: int = 12

    def __post_init__(self) -> None:
        for name in ("micro_batch_size", "num_microbatches", "bytes_per_weight", "bytes_per_gradient",
                     "bytes_per_optimizer_state"):  # fmt: skip
            if name != "num_microbatches" or self.num_microbatches is not None:
                check_int(name, getattr(self, name), minimum=1, error=CostError)
        check_flag("distributed_optimizer", self.distributed_optimizer, error=CostError)
        check_flag("sequence_tensor_parallel", self.sequence_tensor_parallel, error=CostError)
        check_choice("recompute", self.recompute, RECOMPUTE, error=CostError)
        if self.zero_stage is None:
            stage = 1 if self.distributed_optimizer else 0
        else:
            stage = check_int("zero_stage", self.zero_stage, minimum=0, maximum=3, error=CostError)
            if self.distributed_optimizer and stage == 0:
                raise CostError("zero_stage=0 contradicts distributed_optimizer=True (ZeRO stage 1)")
        object.__setattr__(self, "zero_stage", stage)
        object.__setattr__(self, "distributed_optimizer", stage >= 1)

    def replace(self, **changes: Any) -> Training:
        """A copy with ``changes``."""
        if "zero_stage" in changes and "distributed_optimizer" not in changes:
            changes["distributed_optimizer"] = False
        if "distributed_optimizer" in changes and "zero_stage" not in changes:
            changes["zero_stage"] = None
        return dataclasses.replace(self, **changes)

    def microbatches(self, pipeline_parallel: int) -> int:
        """Micro-batches per step: ``num_microbatches``, or ``pipeline_parallel`` when it is ``None``."""
        return pipeline_parallel if self.num_microbatches is None else self.num_microbatches
