"""The training engines the step-time model prices, as records in one registry (issue 27, item 3; issue 44).

An ``Engine`` is one engine as ``Training(engine=...)`` and the CLI name it: what it is, what the step-time model does
differently for it (``EngineTraits``), the sources that justify those traits (its code at a commit, its release
notes) and the engines whose validated runs its error band draws on. ``ENGINE_REGISTRY`` holds them in one literal;
``ENGINES``, ``ENGINE_TRAITS`` and ``BAND_ENGINES`` are read off it. ``DEFAULT_ENGINE`` is the one every prediction
used before engines were a setting, so a ``Training`` that names none is priced as before. A ``Training`` resolves
its engine's name once (``Training.engine_spec``); the formulas read the record it carries.

*A new engine* is one more ``Engine`` in ``ENGINE_REGISTRY`` (a variant of another: ``dataclasses.replace`` of its
traits), citing where each trait comes from; docs/step_time.md, section "Engines", says what each trait prices.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..errors import CostError

DEFAULT_ENGINE = "megatron"
"""The engine of a ``Training`` that names none: Megatron-LM / Megatron-Core."""


@dataclass(frozen=True)
class EngineTraits:
    """What one engine overlaps and how (read by ``cost.overlap``, ``cost.step`` and ``cost.memory``).

    - ``schedules``: the pipeline schedules its pipeline engine runs (``None``: every one of ``SCHEDULES``).
    - ``max_zero_stage_with_pipeline``: the highest ZeRO stage it runs beside pipeline parallelism.
    - ``blocking_pipeline``: its sends and receives between stages block the sender and the receiver, whatever
      ``Training.overlap_pipeline_parallel`` says.
    - ``reduce_after_pipeline``: with ``pipeline_parallel > 1`` the data-parallel gradient reduction runs after
      the last backward, none of it overlapped.
    - ``all_reduce_with_pipeline``: with ``pipeline_parallel > 1`` ZeRO 1 all-reduces the whole gradients (then
      gathers the updated weights) instead of reduce-scattering them, where they are accumulated in fp32 (bf16's
      ``BF16_Optimizer``; ``all_reduces_whole_gradients``).
    - ``tensor_backward_hidden``: the backward's tensor-parallel collectives hide behind the weight-gradient GEMMs
      (Megatron's asynchronous all-reduce); ``False``: they follow the layer's whole backward and the next
      operation waits for them (unless ``Training.overlap_tensor_parallel``).
    - ``per_block``: ZeRO 3 (and FSDP under a pipeline) gathers and reduce-scatters are priced one transformer block
      after the other with ``overlap.block_exposure``: the first gather of a pass and the last reduce-scatter are
      exposed, each one between hides only behind one block's compute, and only as much as is prefetched.
    - ``units_per_block``: what one gather fetches, as a share of a transformer block: FSDP2 the block (1),
      DeepSpeed each sub-module with parameters (4: attention's input and output projections, the MLP's two).
    - ``prefetch_blocks``: units gathered ahead of the one computing (``0``: ``prefetch_elements`` decides).
    - ``prefetch_elements``: parameters gathered ahead, counted unsharded (DeepSpeed's prefetch bucket).
    - ``reduce_bucket_elements``: gradients reduced per bucket (``0``: per block); the last bucket of a pass
      cannot overlap anything and its buffer is held in memory.
    - ``keeps_last_block``: a backward starts without gathering (the last block stays whole after the forward).
    - ``overlaps_zero0``: without ZeRO the gradient all-reduce overlaps the backward (bucketed hooks) where
      ``Training.overlap_data_parallel`` asks for it; ``False``: it runs after the backward.
    - ``gather_after_step``: ZeRO 1/2 gathers the updated weights at the end of the optimizer step (exposed),
      instead of during the next forward.
    - ``reshard_with_pipeline``: with ``pipeline_parallel > 1`` ZeRO 2/3 weights are sharded again after each
      forward; ``False`` (torchtitan's default policy): they are gathered once per step and stay whole.
    - ``sync_last_microbatch_with_pipeline``: with ``pipeline_parallel > 1`` gradients are reduce-scattered on
      the last micro-batch's backward only (``torch.distributed.pipelining``), not once per micro-batch.
    - ``rank_copies``: ZeRO 3 gathers and reduce-scatters each parameter tensor on its own, and each such call
      launches this many copy kernels per rank of the data group (``overlap.copy_seconds``), none of them hidden;
      ``0``: the call writes one flat buffer in place.
    - ``fused_elementwise``: the element-wise work around the GEMMs runs as fused kernels (Megatron's fused
      norms, bias-SwiGLU / bias-GeLU, bias-dropout-add, fused RoPE); ``False``: as torchtitan's Llama code runs in
      eager mode, one kernel per op (``compute.elementwise_bytes``), and its selective (``op``) recompute runs them
      again in the backward.
    - ``recompute_every_second_mm``: its selective recompute is torchtitan's ``op`` policy, which keeps every
      compute op's output except every second ``mm`` of a block: those GEMMs run again in the backward
      (``compute.second_mm_seconds``); ``False``: selective recompute redoes the attention core only (Megatron).
    - ``fused_accumulation``: under ZeRO 0/1 the weight-gradient GEMMs add each micro-batch's gradients into the
      accumulated ones themselves (Megatron-LM's gradient accumulation fusion); ``False``: a separate element-wise
      pass over every parameter tensor does it, reading the new gradient and the accumulator and writing the sum
      (``compute.accumulation_seconds``). ZeRO 2/3 reduce each micro-batch's gradients and accumulate shards: not
      priced.
    """

    schedules: tuple[str, ...] | None
    max_zero_stage_with_pipeline: int
    blocking_pipeline: bool
    reduce_after_pipeline: bool
    all_reduce_with_pipeline: bool
    tensor_backward_hidden: bool
    per_block: bool
    units_per_block: int
    prefetch_blocks: float
    prefetch_elements: float
    reduce_bucket_elements: float
    keeps_last_block: bool
    overlaps_zero0: bool
    gather_after_step: bool
    reshard_with_pipeline: bool
    sync_last_microbatch_with_pipeline: bool
    rank_copies: int = 0
    fused_elementwise: bool = True
    recompute_every_second_mm: bool = False
    fused_accumulation: bool = True



@dataclass(frozen=True, eq=False)
class Engine:
    """One training engine: its ``name`` (as ``Training(engine=...)`` spells it), ``description``, ``traits`` (what
    the step-time model does differently for it), ``sources`` (where each trait comes from) and ``band`` (the engines
    whose validated runs its error band draws on, itself first: ``trust.band_for``). A record is its own identity
    (compared and hashed as the object); pickled by name, so one that crosses a process is the registry's own."""

    name: str
    description: str
    traits: EngineTraits
    sources: tuple[str, ...]
    band: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "band", self.band or (self.name,))

    def __reduce__(self) -> tuple[Any, tuple[str]]:
        return engine_record, (self.name,)

    def check(self, schedule: str, pipeline_parallel: int = 1, zero_stage: int = 0) -> None:
        """``CostError`` (one line naming the value) where this engine cannot run ``schedule`` or ``zero_stage``
        beside ``pipeline_parallel`` pipeline stages."""
        traits = self.traits
        if traits.schedules is not None and schedule not in traits.schedules:
            runs = ", ".join(repr(name) for name in traits.schedules)
            raise CostError(f"engine={self.name!r} runs schedule {runs} only, not schedule={schedule!r}")
        if pipeline_parallel > 1 and zero_stage > traits.max_zero_stage_with_pipeline:
            raise CostError(
                f"engine={self.name!r} runs ZeRO stage {traits.max_zero_stage_with_pipeline} at most with a pipeline, "
                f"not zero_stage={zero_stage} with pipeline_parallel={pipeline_parallel}"
            )

    def allows(self, schedules: Any, pipeline_parallel: Any, zero_stage: Any) -> Any:
        """Per set-up (arrays broadcast), whether this engine runs it (``check`` without raising): what ``search``
        keeps of its candidates."""
        traits = self.traits
        allowed = np.ones(np.broadcast(schedules, pipeline_parallel, zero_stage).shape, dtype=bool)
        if traits.schedules is not None:
            allowed &= np.isin(np.asarray(schedules, dtype=object), traits.schedules)
        deep = np.asarray(zero_stage) <= traits.max_zero_stage_with_pipeline
        return allowed & ((np.asarray(pipeline_parallel) == 1) | deep)

    def all_reduces_whole_gradients(self, pipeline_parallel: int, bytes_per_gradient: int) -> bool:
        """Whether ZeRO 1 all-reduces the whole gradients beside a pipeline of ``pipeline_parallel`` stages rather
        than reduce-scattering them: DeepSpeed's ``BF16_Optimizer``, which keeps fp32 gradients (``bytes_per_gradient``
        4), runs ``buffered_allreduce_fallback``; its fp16 ZeRO 1 reduces each rank's slice
        (``reduce_gradients(pipeline_parallel=True)``, ``runtime/zero/stage_1_and_2.py`` ``average_tensor``: the
        volume of a reduce-scatter; microsoft/DeepSpeed 2151c787 and 38327e07).

        >>> deepspeed = ENGINE_REGISTRY["deepspeed"]
        >>> deepspeed.all_reduces_whole_gradients(4, 4), deepspeed.all_reduces_whole_gradients(4, 2)
        (True, False)
        >>> deepspeed.all_reduces_whole_gradients(1, 4), ENGINE_REGISTRY["megatron"].all_reduces_whole_gradients(4, 4)
        (False, False)
        """
        return pipeline_parallel > 1 and self.traits.all_reduce_with_pipeline and bytes_per_gradient == 4

    def gathers_once(self, pipeline_parallel: int) -> bool:
        """Whether ZeRO 2/3 weights are gathered once per step beside a pipeline of ``pipeline_parallel`` stages,
        kept whole and reduce-scattered on the last micro-batch only (torchtitan's FSDP2 with PP).

        >>> fsdp2 = ENGINE_REGISTRY["fsdp2"]
        >>> fsdp2.gathers_once(4), fsdp2.gathers_once(1), ENGINE_REGISTRY["deepspeed"].gathers_once(4)
        (True, False, False)
        """
        traits = self.traits
        return pipeline_parallel > 1 and not traits.reshard_with_pipeline and traits.sync_last_microbatch_with_pipeline


_MEGATRON = EngineTraits(
    schedules=None, max_zero_stage_with_pipeline=3, blocking_pipeline=False, reduce_after_pipeline=False,
    all_reduce_with_pipeline=False, tensor_backward_hidden=True, per_block=False,
    units_per_block=1, prefetch_blocks=1.0, prefetch_elements=0.0, reduce_bucket_elements=0.0,
    keeps_last_block=False, overlaps_zero0=True, gather_after_step=False, reshard_with_pipeline=True,
    sync_last_microbatch_with_pipeline=False,
)  # fmt: skip
_DEEPSPEED = EngineTraits(
    schedules=("1f1b",), max_zero_stage_with_pipeline=1, blocking_pipeline=True, reduce_after_pipeline=True,
    all_reduce_with_pipeline=True, tensor_backward_hidden=True, per_block=True,
    units_per_block=4, prefetch_blocks=0.0, prefetch_elements=5e7, reduce_bucket_elements=5e8,
    keeps_last_block=False, overlaps_zero0=False, gather_after_step=True, reshard_with_pipeline=True,
    sync_last_microbatch_with_pipeline=False, fused_accumulation=False,
)  # fmt: skip
_FSDP2 = EngineTraits(
    schedules=None, max_zero_stage_with_pipeline=3, blocking_pipeline=False, reduce_after_pipeline=False,
    all_reduce_with_pipeline=False, tensor_backward_hidden=False, per_block=True,
    units_per_block=1, prefetch_blocks=1.0, prefetch_elements=0.0, reduce_bucket_elements=0.0,
    keeps_last_block=True, overlaps_zero0=True, gather_after_step=False, reshard_with_pipeline=False,
    sync_last_microbatch_with_pipeline=True, fused_elementwise=False, recompute_every_second_mm=True,
)  # fmt: skip

ENGINE_REGISTRY: dict[str, Engine] = {engine.name: engine for engine in (
    Engine("megatron", "Megatron-LM / Megatron-Core (NVIDIA), the engine of the calibration runs", _MEGATRON, (
        "what the model did before engines were a setting (calibrated on its runs)",
        "NVIDIA/Megatron-LM 83b1e42f30 (2022-02-13): the weight-gradient GEMMs accumulate into main_grad "
        "(--gradient-accumulation-fusion, on by default): fused_accumulation",
    ), band=("megatron", "megatron-2021")),
    Engine("deepspeed", "DeepSpeed (Microsoft), ZeRO stages and its pipeline engine (Megatron-DeepSpeed)", _DEEPSPEED, (
        "microsoft/DeepSpeed 38327e07 runtime/pipe/engine.py: asserts ZeRO < 2 with a pipeline; sends with blocking "
        "p2p.send / p2p.recv (runtime/pipe/p2p.py); runtime/pipe/schedule.py TrainSchedule is 1F1B and issues "
        "ReduceTiedGrads and ReduceGrads after the last backward",
        "runtime/zero/config.py: reduce_bucket_size 5e8, stage3_prefetch_bucket_size 5e7 elements; ZeRO 1/2 all-gather "
        "the updated weights in the optimizer step (runtime/zero/stage_1_and_2.py step)",
        "bf16 with ZeRO 1 runs BF16_Optimizer, whose ReduceGrads beside a pipeline is "
        "engine.buffered_allreduce_fallback (dist.all_reduce of the gradients in 5e8-element buffers), then "
        "update_lp_params gathers the weights (runtime/bf16_optimizer.py, runtime/pipe/engine.py _exec_reduce_grads)",
        "ZeRO 3 fetches each sub-module's parameters in its pre-forward hook and prefetches along the recorded trace "
        "up to the prefetch bucket (runtime/zero/partitioned_param_coordinator.py fetch_sub_module)",
        "its rows ran Megatron-DeepSpeed, whose model code keeps Megatron's fused kernels "
        "(bigscience-workshop/Megatron-DeepSpeed megatron/model/fused_layer_norm.py, fused_softmax.py, transformer.py "
        "bias_dropout_add_fused_train and bias-GeLU): fused_elementwise stays True",
        "under ZeRO 0/1 each micro-batch's gradients are added into the accumulated ones by torch's AccumulateGrad "
        "(fp16: in place into .grad) or, with bf16, by BF16_Optimizer's update_hp_grads (into fp32 gradients, "
        "runtime/bf16_optimizer.py): fused_accumulation False",
    )),
    Engine("fsdp2", "torch's fully_shard (FSDP2) as torchtitan runs it, with torch.distributed.pipelining, its Llama "
           "code in eager mode: every element-wise op its own kernel", _FSDP2, (
        "pytorch/torchtitan b5bcd76c torchtitan/distributed/fsdp.py: fully_shard per transformer block, "
        "reshard_after_forward 'default' = not pp_enabled, the last block not resharded; FSDP2's implicit prefetch of "
        "one block",
        "torch/distributed/pipelining/stage.py backward_maybe_with_nosync: set_requires_gradient_sync(False) and "
        "set_reshard_after_backward(False) but on the last backward",
        "its tensor parallel (torchtitan parallelize: ColwiseParallel / RowwiseParallel DTensor plans) runs each "
        "backward collective as the backward of a redistribute, after the linear's input- and weight-gradient GEMMs, "
        "waited on by the next operation (asynchronous TP only under torch.compile)",
        "its selective recompute is the 'op' policy (torchtitan d4c86e3758, parallelisms/parallelize_llama.py "
        "_save_list, _custom_policy: 'Saves output of all compute ops, except every second mm')",
    )),
    Engine("deepspeed-0.3", "DeepSpeed as of its ZeRO-3 / ZeRO-Infinity release (v0.3.15, April 2021, on PyTorch "
           "1.8), whose ZeRO 3 collectives cost kernels per data-parallel rank",
           dataclasses.replace(_DEEPSPEED, rank_copies=1), (
        "microsoft/DeepSpeed 2c2a7f31 (v0.3.15, 2021-04-19), the ZeRO-3 of Narayanan et al. 2021's Table 2: "
        "runtime/zero/stage3.py fetch_sub_module and prefetch_next_sub_modules gather with async_op=True, which "
        "runtime/zero/partition_parameters.py _all_gather runs as one _allgather_param per parameter tensor: a "
        "torch.cuda.synchronize(), then torch.distributed.all_gather into a list of world_size views; gradients are "
        "reduce-scattered one tensor at a time (_reduce_scatter_gradient)",
        "PyTorch 1.8's ProcessGroupNCCL::allgather / reduce_scatter (torch/lib/c10d/ProcessGroupNCCL.cpp) flattens "
        "such a list: one copy_ per rank out of (into) its flat buffer; fetch_sub_module waits for every gather "
        "(_synchronize_communication) before the sub-module computes: rank_copies 1; the rest as deepspeed",
    )),
    Engine("deepspeed-0.5", "DeepSpeed's pipeline engine of late 2021 / early 2022 (v0.5-v0.6) with the "
           "Megatron-DeepSpeed model code of that time (MT-NLG, BLOOM), whose tensor-parallel backward all-reduces are "
           "not hidden", dataclasses.replace(_DEEPSPEED, tensor_backward_hidden=False), (
        "as MT-NLG (Smith et al. 2022) and BLOOM's layout search (DeepSpeed 2151c787, 2022-02-18) ran it: "
        "ColumnParallelLinear.forward calls copy_to_tensor_model_parallel_region (megatron/mpu/layers.py at "
        "microsoft/Megatron-DeepSpeed 0d887558, 2021-09-22, and 3704a0a0, 2022-01-28; "
        "bigscience-workshop/Megatron-DeepSpeed 7e5ec511, 2022-02-26), whose backward all-reduces the input gradient "
        "after the linear's backward, and the layer below waits for it",
        "today's Megatron-DeepSpeed runs LinearWithGradAccumulationAndAsyncCommunication "
        "(megatron/core/tensor_parallel/layers.py), as deepspeed prices; the rest as deepspeed",
    )),
    Engine("composer-fsdp", "torch FSDP as MosaicML's Composer runs llm-foundry's MPT: fsdp2's overlap, with MPT's "
           "one-kernel LayerNorm, GeLU and flash attention (element-wise work priced as Megatron's)",
           dataclasses.replace(_FSDP2, fused_elementwise=True, recompute_every_second_mm=False), (
        "mosaicml/llm-foundry 061f2c7ce6 scripts/train/benchmarking: FSDP's overlap taken as fsdp2's (the closest the "
        "engines have)",
        "MPT's blocks run one-kernel element-wise work: low_precision_layernorm (one F.layer_norm), GeLU without bias, "
        "flash / triton attention with ALiBi (no RoPE), no dropout: priced as Megatron's fused kernels",
    )),
    Engine("megatron-2021", "Megatron-LM as Narayanan et al. 2021 ran it (before September 2021), whose "
           "tensor-parallel backward all-reduces are not hidden",
           dataclasses.replace(_MEGATRON, tensor_backward_hidden=False, fused_accumulation=False), (
        "NVIDIA/Megatron-LM de7dc40f88 (2021-08-10, the commit that added examples/sc21): megatron/mpu/layers.py "
        "ColumnParallelLinear.forward calls copy_to_tensor_model_parallel_region, whose backward all-reduces the input "
        "gradient after the linear's backward, and the layer below waits for it; the asynchronous all-reduce came "
        "after (--async-tensor-parallel-allreduce, cf7efd4f5a, 2021-08-30)",
        "its local DDP adds each micro-batch's gradients into the contiguous main_grad buffer in a hook, "
        "param.main_grad.add_(param.grad.data) (megatron/model/distributed.py); the fused accumulation came later "
        "(83b1e42f30, 2022-02-13); the rest as megatron",
    ), band=("megatron-2021", "megatron")),
)}  # fmt: skip
"""Every engine by name, in the order the CLI lists them (``Engine``: traits, sources, band)."""

ENGINES: tuple[str, ...] = tuple(ENGINE_REGISTRY)
"""The engines ``Training(engine=...)`` accepts (``ENGINE_REGISTRY``'s names)."""

ENGINE_TRAITS: dict[str, EngineTraits] = {name: engine.traits for name, engine in ENGINE_REGISTRY.items()}
"""``EngineTraits`` of each of ``ENGINES`` (read off ``ENGINE_REGISTRY``)."""

BAND_ENGINES: dict[str, tuple[str, ...]] = {
    name: engine.band for name, engine in ENGINE_REGISTRY.items() if engine.band != (name,)
}
"""The engines whose validation runs an engine's error band draws on, where not the engine alone (read off
``ENGINE_REGISTRY``): Megatron-LM of 2021 and of today differ by one thing the model prices (the tensor-parallel
backward all-reduce hidden or not) and are one engine's versions. DeepSpeed's versions are not pooled: what its 2021-22
runs miss (docs/validation.md, "What the model does not capture") is not known to hold for today's DeepSpeed."""


def engine_record(name: str) -> Engine:
    """The ``Engine`` called ``name``; ``CostError`` naming the value and the choices otherwise (the one place an
    engine's name is looked up)."""
    engine = ENGINE_REGISTRY.get(name) if isinstance(name, str) else None
    if engine is None:
        raise CostError(f"engine={name!r} must be one of {', '.join(map(repr, ENGINES))}")
    return engine


def band_engines(engine: str) -> tuple[str, ...]:
    """The engines whose validation runs ``engine``'s error band draws on (``Engine.band``).

    >>> band_engines("megatron"), band_engines("deepspeed")
    (('megatron', 'megatron-2021'), ('deepspeed',))
    """
    return engine_record(engine).band


def check_engine(engine: str, schedule: str, pipeline_parallel: int = 1, zero_stage: int = 0) -> None:
    """Raise ``CostError`` (one line naming the value) where ``engine`` cannot run ``schedule`` or ``zero_stage``
    beside ``pipeline_parallel`` pipeline stages (``Engine.check``).

    >>> check_engine("deepspeed", "1f1b", 4, 1)
    >>> check_engine("deepspeed", "zero-bubble", 4, 1)
    Traceback (most recent call last):
    ...
    fastdist_lab.errors.CostError: engine='deepspeed' runs schedule '1f1b' only, not schedule='zero-bubble'
    """
    engine_record(engine).check(schedule, pipeline_parallel, zero_stage)
