"""How the model is trained: micro-batches, optimizer sharding (ZeRO), sequence tensor parallel, recompute, the
pipeline schedule, the attention kernel, which communication overlaps computation and the engine.

Each field is declared once, with its ``Setting`` (``setup/settings.py``): its flag and help, its range or choices, the
values the search tries and its control in the panels; the commands, the panels and the search are generated from
these declarations (``TRAINING_SETTINGS``)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from ..errors import CostError
from .engines import DEFAULT_ENGINE, ENGINES, Engine, engine_record
from .schedule_kinds import (
    MAX_MICROBATCHES,
    SCHEDULES,
    SEARCHED_SCHEDULES,
    ScheduleKind,
    check_schedule,
    schedule_kind,
)
from .settings import Setting, check_settings, setting, settings_of
from .transformer import MAX_LAYERS

MAX_MICRO_BATCH = 2**14
"""The most sequences a micro-batch holds (16,384): far above any run, and small enough that no byte count of a
set-up overflows 64 bits."""

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

    Bad values raise ``CostError`` naming the field. ``schedule_spec`` and ``engine_spec`` are the schedule's and the
    engine's records (``ScheduleKind``, ``Engine``), looked up once here and carried along every call.
    """

    micro_batch_size: int = setting(
        1, flag="--micro-batch-size", help="sequences per micro-batch", kind="int", minimum=1,
        maximum=MAX_MICRO_BATCH, search="varied", tried=(1, 2, 4, 8), control="int", label="micro-batch",
        css="micro-batch",
    )
    num_microbatches: int | None = setting(
        None, flag="--micro-batches", aliases=("--num-microbatches",), kind="optional int", minimum=1,
        maximum=MAX_MICROBATCHES,
        help="micro-batches per step and data rank", none_means="the pipeline size", search=None, control="int",
        label="micro-batches (0: stages)", css="microbatches",
    )
    distributed_optimizer: bool = setting(
        False, flag="--distributed-optimizer", help="shard optimizer states (ZeRO 1)", kind="flag", search=None,
        excludes="zero_stage",
    )
    zero_stage: int | None = setting(
        None, flag="--zero-stage", help="ZeRO stage 0-3", kind="optional int", minimum=0, maximum=3,
        none_means="0, or 1 with --distributed-optimizer", search="varied", tried=(0, 1, 2, 3), control="dropdown",
        choices=(0, 1, 2, 3), option_labels=("0: none", "1: distributed optimizer", "2: + gradients", "3: + weights"),
        label="ZeRO", css="zero", panels=("cost", "train"),
    )
    sequence_tensor_parallel: bool = setting(
        False, flag="--sequence-tensor-parallel", help="split the residual stream along the sequence over the tensor "
        "group", kind="flag", search="varied", tried=(False, True), control="checkbox",
        label="sequence tensor parallel", css="stp",
    )
    recompute: str = setting(
        "none", flag="--recompute", help="activation recompute in the backward pass", kind="choice",
        choices=RECOMPUTE, search="varied", tried=RECOMPUTE, control="dropdown", label="recompute", css="recompute",
        panels=("cost", "train"), cli_choices=True,
    )
    bytes_per_weight: int = setting(
        2, flag="--bytes-per-weight", help="bytes per weight (bf16: 2)", kind="int", minimum=1, maximum=64,
        search=None,
    )
    bytes_per_gradient: int = setting(
        4, flag="--bytes-per-gradient", help="bytes per gradient (fp32: 4)", kind="int", minimum=1, maximum=64,
        search=None,
    )
    bytes_per_optimizer_state: int = setting(
        12, flag="--bytes-per-optimizer-state", kind="int", minimum=1, maximum=64, search=None,
        help="bytes of optimizer state per parameter (fp32 master weights and Adam's two moments: 12)",
    )
    schedule: str = setting(
        "1f1b", flag="--schedule", help="pipeline schedule", kind="choice", choices=SCHEDULES, search="varied",
        tried=SEARCHED_SCHEDULES, control="dropdown", label="schedule", css="schedule", panels=("cost", "train"),
    )
    virtual_pipeline_stages: int = setting(
        1, flag="--virtual-pipeline-stages", aliases=("--virtual-stages",), kind="int", minimum=1, maximum=1024,
        help="model chunks per pipeline rank (>= 2 for interleaved-1f1b)", search="varied",
        tried=(1, 2, 3, 4, 6, 8), control="int", label="virtual stages", css="virtual-stages",
        panels=("cost", "train"),
    )
    layers_per_stage: tuple[int, ...] | None = setting(
        None, flag="--layers-per-stage", help="layers of each model chunk in stage order", kind="counts",
        minimum=0, maximum=MAX_LAYERS, meaning="layer counts", none_means="an even split", search=None,
    )
    flash_attention: bool = setting(
        True, flag="--flash-attention", help="a fused attention kernel that never stores the scores", kind="flag",
    )
    overlap_data_parallel: bool = setting(
        True, flag="--overlap-data-parallel", kind="flag",
        help="gradient reductions and parameter gathers overlap the backward and forward",
    )
    overlap_tensor_parallel: bool = setting(
        False, flag="--overlap-tensor-parallel", help="tensor-parallel collectives overlap the GEMMs they feed",
        kind="flag",
    )
    overlap_pipeline_parallel: bool = setting(
        True, flag="--overlap-pipeline-parallel", kind="flag",
        help="activations and gradients between stages travel while the stages compute",
    )
    expert_load_imbalance: float = setting(
        1.0, flag="--expert-load-imbalance", kind="number", minimum=1.0, maximum=1e6,
        meaning="busiest rank over the mean", help="mixture of experts: the busiest expert rank's tokens over the "
        "mean", control="float", label="expert load (busiest / mean)", css="expert-load",
    )
    engine: str = setting(
        DEFAULT_ENGINE, flag="--engine", help="training engine", kind="choice", choices=ENGINES, control="dropdown",
        label="engine", css="engine", panels=("cost", "advisor"),
    )
    torch_compile: bool = setting(
        False, flag="--torch-compile", help="the model runs under torch.compile: element-wise work fused",
        kind="flag", control="checkbox", label="torch.compile", css="compile", panels=("cost", "advisor"),
    )  # fmt: skip

    def __post_init__(self) -> None:
        check_settings(self)
        engine = engine_record(self.engine)
        engine.check(self.schedule)
        object.__setattr__(self, "_engine", engine)
        object.__setattr__(self, "_schedule", schedule_kind(self.schedule))
        # the virtual stages a schedule takes (the micro-batches are checked against a pipeline when one is known)
        check_schedule(self._schedule, 1, 1, self.virtual_pipeline_stages)
        stage = self.zero_stage
        if stage is None:
            stage = 1 if self.distributed_optimizer else 0
        elif self.distributed_optimizer and stage == 0:
            raise CostError("zero_stage=0 contradicts distributed_optimizer=True (ZeRO stage 1)")
        object.__setattr__(self, "zero_stage", stage)
        object.__setattr__(self, "distributed_optimizer", stage >= 1)

    @property
    def engine_spec(self) -> Engine:
        """The engine's record (``Engine``: its traits, sources and band)."""
        return self._engine

    @property
    def schedule_spec(self) -> ScheduleKind:
        """The pipeline schedule's record (``ScheduleKind``)."""
        return self._schedule

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


TRAINING_SETTINGS: dict[str, Setting] = settings_of(Training)
"""Every field of ``Training`` -> its ``Setting`` (flag, help, range or choices, search values, control), in order."""
