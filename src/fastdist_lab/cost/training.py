"""How the model is trained: micro-batches, optimizer sharding (ZeRO), sequence tensor parallel, recompute, the
pipeline schedule, the attention kernel and which communication overlaps computation."""

from __future__ import annotations

import dataclasses
import numbers
from dataclasses import dataclass
from typing import Any

from ..errors import CostError
from ..validation import check_choice, check_flag, check_int
from .engines import DEFAULT_ENGINE, ENGINES, check_engine
from .schedule_kinds import check_schedule

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

    - ``schedule``: the pipeline schedule (``SCHEDULES``, the registry ``schedule_kinds.SCHEDULE_KINDS``: torch's
      ``ScheduleGPipe``, ``Schedule1F1B``, ``ScheduleInterleaved1F1B``, ``ScheduleLoopedBFS``,
      ``ScheduleInterleavedZeroBubble``); ``virtual_pipeline_stages``: model chunks per pipeline rank (Narayanan et
      al. 2021, Section 2.2.2), at least 2 for ``"interleaved-1f1b"``, 1 for ``"gpipe"`` and ``"1f1b"``, any for
      ``"looped-bfs"`` and ``"zero-bubble"``.
    - ``layers_per_stage``: layers of each model chunk in stage order (``pipeline_parallel *
      virtual_pipeline_stages`` entries), e.g. Llama 3 405B's 126 layers over 16 stages as ``(7,) + (8,) * 14 +
      (7,)`` (Dubey et al. 2024, Section 3.3.2); ``None`` splits evenly, the first chunks one layer more.
    - ``flash_attention``: a fused attention kernel that never stores the ``s x s`` scores (Dao et al. 2022); with
      ``False`` the scores, their softmax and dropout mask are kept per layer unless recompute covers them
      (Korthikanti et al. 2022, Table 2) and the softmax runs as separate memory-bound kernels.
    - ``overlap_data_parallel``: gradient reduce-scatter / all-reduce and parameter all-gather overlap the
      backward and forward passes (Megatron-LM ``--overlap-grad-reduce --overlap-param-gather``, PyTorch FSDP's
      prefetching); ``False``: they run after the last backward, as Megatron-LM did before 2023.
    - ``overlap_tensor_parallel``: tensor-parallel collectives overlap the GEMMs they feed (Megatron-LM
      ``--tp-comm-overlap``, Transformer Engine userbuffers; Wang et al. 2022); ``False``: the forward ones are
      exposed and the backward ones hide behind the weight-gradient GEMMs (Megatron-LM's asynchronous
      all-reduce).
    - ``overlap_pipeline_parallel``: the activations and gradients sent between pipeline stages travel while the
      stages compute (Megatron-Core's ``--overlap-p2p-communication``, torch.distributed.pipelining's
      asynchronous sends); ``False``: each forward and backward waits for its blocking send and receive, as
      Megatron-LM's 1F1B did (``send_forward_recv_backward``).

    - ``expert_load_imbalance``: for a mixture of experts, the tokens the busiest expert rank receives over the
      mean (1.0, the default: a perfectly balanced router, what an auxiliary load-balancing loss aims at; Lepikhin
      et al. 2021's capacity factor bounds it, e.g. 1.25). The slowest rank's expert GEMMs, permutation and
      all-to-all scale by it, and so do its stored expert activations.
    - ``engine``: the training engine that runs the step (``engines.ENGINES``: ``"megatron"``, the default,
      ``"deepspeed"``, ``"fsdp2"``, ``"deepspeed-0.3"``, DeepSpeed's ZeRO-3 of 2021, ``"deepspeed-0.5"``, its pipeline
      engine of 2021-22, ``"composer-fsdp"`` or ``"megatron-2021"``, Megatron-LM before its asynchronous
      tensor-parallel all-reduce); a run is predicted for the
      engine it used (``engines.ENGINE_TRAITS``: what each overlaps; DeepSpeed's pipeline engine runs ``"1f1b"``
      only, and ZeRO 0-1 beside a pipeline).
    - ``torch_compile``: the model runs under ``torch.compile`` (torchtitan's ``--training.compile``): Inductor
      fuses the element-wise work around the GEMMs (norms, activations, residual adds, RoPE) into a few kernels, so
      an engine whose eager code runs one kernel per op (``fsdp2``) is priced with fused element-wise kernels, as
      Megatron's (``compute.elementwise_bytes``); nothing else changes (False, the default: eager).

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
    schedule: str = "1f1b"
    virtual_pipeline_stages: int = 1
    layers_per_stage: tuple[int, ...] | None = None
    flash_attention: bool = True
    overlap_data_parallel: bool = True
    overlap_tensor_parallel: bool = False
    overlap_pipeline_parallel: bool = True
    expert_load_imbalance: float = 1.0
    engine: str = DEFAULT_ENGINE
    torch_compile: bool = False

    def __post_init__(self) -> None:
        check_int("micro_batch_size", self.micro_batch_size, minimum=1, error=CostError)
        if self.num_microbatches is not None:
            check_int("num_microbatches", self.num_microbatches, minimum=1, error=CostError)
        check_flag("distributed_optimizer", self.distributed_optimizer, error=CostError)
        check_flag("sequence_tensor_parallel", self.sequence_tensor_parallel, error=CostError)
        check_choice("recompute", self.recompute, RECOMPUTE, error=CostError)
        check_choice("engine", self.engine, ENGINES, error=CostError)
        check_engine(self.engine, self.schedule)
        for name in ("bytes_per_weight", "bytes_per_gradient", "bytes_per_optimizer_state"):
            check_int(name, getattr(self, name), minimum=1, error=CostError)
        for name in ("flash_attention", "overlap_data_parallel", "overlap_tensor_parallel",
                     "overlap_pipeline_parallel", "torch_compile"):  # fmt: skip
            check_flag(name, getattr(self, name), error=CostError)
        imbalance = self.expert_load_imbalance
        if isinstance(imbalance, bool) or not isinstance(imbalance, numbers.Real) or not 1.0 <= imbalance < 1e6:
            raise CostError(f"expert_load_imbalance={imbalance!r} must be a number >= 1 (busiest rank over the mean)")
        object.__setattr__(self, "expert_load_imbalance", float(imbalance))
        # the name and the virtual stages (the micro-batches are checked against a pipeline when one is known)
        check_schedule(self.schedule, 1, 1, self.virtual_pipeline_stages)
        if self.layers_per_stage is not None:
            if isinstance(self.layers_per_stage, (str, bytes)) or not hasattr(self.layers_per_stage, "__iter__"):
                raise CostError(f"layers_per_stage={self.layers_per_stage!r} must be a sequence of layer counts")
            counts = tuple(self.layers_per_stage)
            for count in counts:  # a stage may hold no layer (Llama 3's first and last chunks: embedding, loss)
                if isinstance(count, bool) or not isinstance(count, numbers.Integral) or count < 0:
                    raise CostError(f"layers_per_stage={self.layers_per_stage!r} must hold integers >= 0")
            object.__setattr__(self, "layers_per_stage", tuple(int(c) for c in counts))
        stage = self.zero_stage
        if stage is None:
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
