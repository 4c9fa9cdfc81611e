"""Training engines as a setting (issue 27, items 2 and 3): Megatron's predictions unchanged, each engine's
behaviour shown by a property, overlap bounded by what can hide it, refusals named."""

from __future__ import annotations

import dataclasses
import subprocess
import sys

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fastdist_lab import Layout
from fastdist_lab.cost import (
    DEFAULT_EFFICIENCY,
    ENGINE_TRAITS,
    ENGINES,
    PUBLISHED_RUNS,
    TRUST_RUNS,
    Efficiency,
    EngineTraits,
    Hardware,
    Training,
    Transformer,
    band_engines,
    band_for,
    block_exposure,
    estimate,
    search,
)
from fastdist_lab.cost.formulas.compute import elementwise_bytes, gemm, layer_times, second_mm_seconds, streamed
from fastdist_lab.cost.formulas.overlap import block_tensors
from fastdist_lab.errors import CostError
from fastdist_lab.setup.engines import ENGINE_REGISTRY, check_engine

H100 = "h100-sxm-80gb"

# Set-ups: (tensor, pipeline, ZeRO stage, micro-batches) on 256 GPUs of a 7B model; the reference step seconds
# of the main branch before engines were a setting (8dfcdf3), on the H100 preset.
MEGATRON_STEPS = {
    (1, 1, 3, 4): 1.6991,
    (2, 4, 1, 16): 1.1624,
    (1, 4, 0, 8): 1.2432,
    (1, 1, 2, 4): 1.6991,
    (1, 4, 3, 8): 1.2147,
}


def _report(tp: int, pp: int, zero: int, m: int, **training: object):
    layout = Layout(world_size=256, local_world_size=8, tensor_parallel=tp, pipeline_parallel=pp)
    return estimate(layout, Transformer.preset("llama2-7b"), Training(zero_stage=zero, num_microbatches=m, **training))


@pytest.mark.parametrize("sizes", sorted(MEGATRON_STEPS))
def test_megatron_is_the_default_and_its_predictions_are_unchanged(sizes):
    omitted = _report(*sizes).step(H100)
    named = _report(*sizes, engine="megatron").step(H100)
    assert omitted.seconds == named.seconds
    assert omitted.seconds == pytest.approx(MEGATRON_STEPS[sizes], abs=5e-5)
    assert omitted.parts == named.parts


def test_deepspeed_with_a_pipeline_exposes_the_whole_gradient_reduction():
    # ReduceGrads after the last backward: the whole data-parallel all-reduce follows the pipeline, as it does
    # with overlap_data_parallel=False under Megatron (blocking sends too, as overlap_pipeline_parallel=False; and
    # Megatron-LM of 2021, which accumulates gradients in a pass of its own as DeepSpeed does).
    deepspeed = _report(1, 4, 0, 8, engine="deepspeed").step(H100)
    unhidden = _report(1, 4, 0, 8, engine="megatron-2021", overlap_data_parallel=False,
                       overlap_pipeline_parallel=False).step(H100)  # fmt: skip
    megatron = _report(1, 4, 0, 8).step(H100)
    assert deepspeed.seconds == pytest.approx(unhidden.seconds, rel=1e-9)
    assert deepspeed.parts["data_comm_seconds"] > megatron.parts["data_comm_seconds"]
    assert deepspeed.seconds > megatron.seconds


def test_deepspeed_zero1_beside_a_pipeline_all_reduces_its_gradients_after_the_last_backward():
    # fp32 gradients (bf16's BF16_Optimizer): the whole gradients all-reduced after the flush
    deepspeed = _report(2, 4, 1, 16, engine="deepspeed")
    unhidden = _report(2, 4, 1, 16, overlap_data_parallel=False, overlap_pipeline_parallel=False)
    assert deepspeed.step(H100).parts["data_comm_seconds"] > unhidden.step(H100).parts["data_comm_seconds"]
    rows = deepspeed.communication
    assert set(rows[rows["dim"] == "data"]["collective"]) == {"all_reduce", "all_gather"}
    # fp16 gradients: ZeRO 1 reduces each rank's slice (a reduce-scatter's volume), still after the flush: as
    # Megatron without overlap, half an all-reduce less than with fp32 gradients of the same bytes
    fp16 = _report(2, 4, 1, 16, engine="deepspeed", bytes_per_gradient=2)
    plain = _report(2, 4, 1, 16, overlap_data_parallel=False, overlap_pipeline_parallel=False, bytes_per_gradient=2)
    rows = fp16.communication
    assert set(rows[rows["dim"] == "data"]["collective"]) == {"reduce_scatter", "all_gather"}
    assert fp16.step(H100).parts["data_comm_seconds"] == pytest.approx(plain.step(H100).parts["data_comm_seconds"])


def test_deepspeed_without_a_pipeline_hides_all_but_its_last_bucket():
    overlapped = _report(1, 1, 1, 4, engine="deepspeed").step(H100)
    after = _report(1, 1, 1, 4, engine="deepspeed", overlap_data_parallel=False).step(H100)
    megatron = _report(1, 1, 1, 4).step(H100)
    assert megatron.seconds < overlapped.seconds < after.seconds
    assert overlapped.parts["data_comm_seconds"] > 0  # the last 5e8-element bucket and the gather after the step


def test_zero3_per_block_never_hides_more_than_megatrons_whole_stage_bound():
    megatron = _report(1, 1, 3, 4).step(H100)
    for engine in ("fsdp2", "deepspeed"):
        step = _report(1, 1, 3, 4, engine=engine).step(H100)
        assert step.seconds > megatron.seconds
        assert step.parts["data_comm_seconds"] > 0


def test_fsdp2_under_a_pipeline_gathers_once_and_holds_the_stage_whole():
    # torchtitan: reshard_after_forward=False with PP, gradients reduce-scattered on the last micro-batch only
    fsdp = _report(1, 4, 3, 8, engine="fsdp2")
    megatron = _report(1, 4, 3, 8)
    held = fsdp.memory["temporaries_bytes"] - megatron.memory["temporaries_bytes"]
    parameters = fsdp.memory["parameters"]
    # whole bf16 weights and fp32 gradients of the stage, less the shard already counted
    expected = parameters * (2 + 4) * (1 - 1 / 64)
    assert np.allclose(held, expected, rtol=1e-6, atol=8)
    assert fsdp.step(H100).parts["data_comm_seconds"] < megatron.step(H100).parts["data_comm_seconds"] + 0.05


def test_fsdp2_under_a_pipeline_lists_one_gather_and_one_reduce_scatter_per_step():
    def data_calls(report):
        rows = report.communication
        rows = rows[rows["dim"] == "data"]
        return dict(zip(rows["collective"], rows["calls_per_step"]))

    assert data_calls(_report(1, 4, 3, 8, engine="fsdp2")) == {"reduce_scatter": 1, "all_gather": 1}
    assert data_calls(_report(1, 4, 3, 8)) == {"reduce_scatter": 8, "all_gather": 16}
    assert data_calls(_report(1, 1, 3, 4, engine="fsdp2")) == {"reduce_scatter": 4, "all_gather": 8}


def test_fsdp2_tensor_parallel_backward_collectives_wait_unless_asynchronous():
    # torchtitan's DTensor plans: the collective follows the linear's whole backward; Megatron hides it behind the
    # weight-gradient GEMMs
    fsdp = _report(8, 1, 3, 4, engine="fsdp2").step(H100).parts["tensor_comm_seconds"]
    megatron = _report(8, 1, 3, 4).step(H100).parts["tensor_comm_seconds"]
    assert fsdp > megatron
    asynchronous = _report(8, 1, 3, 4, engine="fsdp2", overlap_tensor_parallel=True).step(H100)
    assert asynchronous.parts["tensor_comm_seconds"] == pytest.approx(
        _report(8, 1, 3, 4, overlap_tensor_parallel=True).step(H100).parts["tensor_comm_seconds"]
    )


def test_deepspeed_buffers_are_counted_in_memory():
    deepspeed = _report(1, 1, 1, 4, engine="deepspeed").memory["temporaries_bytes"].iloc[0]
    megatron = _report(1, 1, 1, 4).memory["temporaries_bytes"].iloc[0]
    assert deepspeed - megatron == 5 * 10**8 * 2  # one reduce bucket of 5e8 bf16 elements
    without = _report(1, 1, 1, 4, engine="deepspeed", overlap_data_parallel=False).memory["temporaries_bytes"]
    assert without.iloc[0] == megatron


@given(
    gather=st.floats(0, 10),
    scatter=st.floats(0, 10),
    compute=st.floats(0, 10),
    blocks=st.integers(1, 200),
    depth=st.floats(0, 4),
    lead=st.booleans(),
    bucket=st.floats(0, 1),
)
@settings(max_examples=300, deadline=None)
def test_exposed_time_is_never_negative_nor_more_than_the_collectives(gather, scatter, compute, blocks, depth, lead,
                                                                      bucket):  # fmt: skip
    exposed = float(block_exposure(gather, scatter, compute, blocks, depth=depth, lead=lead, bucket=bucket))
    assert -1e-12 <= exposed <= gather + scatter + 1e-9
    assert exposed >= gather + scatter - compute - 1e-9  # never below Megatron's whole-stage bound
    # more compute never exposes more; a deeper prefetch never exposes more
    assert float(block_exposure(gather, scatter, compute + 1, blocks, depth=depth, lead=lead, bucket=bucket)) <= (
        exposed + 1e-9
    )
    assert float(block_exposure(gather, scatter, compute, blocks, depth=depth + 1, lead=lead, bucket=bucket)) <= (
        exposed + 1e-9
    )


def test_block_exposure_hides_everything_but_the_first_gather_and_last_scatter_when_compute_is_long():
    assert float(block_exposure(4.0, 4.0, 100.0, 4)) == pytest.approx(2.0)
    assert float(block_exposure(4.0, 4.0, 100.0, 4, depth=0.5)) == pytest.approx(1.0 + 1.0 + 0.5 * 3.0)


def test_refusals_name_the_value():
    refusal = "engine='deepspeed' runs schedule '1f1b' only, not schedule='interleaved-1f1b'"
    with pytest.raises(CostError, match=refusal):
        Training(engine="deepspeed", schedule="interleaved-1f1b", virtual_pipeline_stages=2)
    with pytest.raises(CostError, match="zero_stage=2 with pipeline_parallel=4"):
        _report(1, 4, 2, 8, engine="deepspeed")
    with pytest.raises(CostError, match="engine='tpu'"):
        Training(engine="tpu")
    with pytest.raises(CostError, match="engine='tpu'"):
        check_engine("tpu", "1f1b")
    _report(1, 1, 3, 4, engine="deepspeed")  # ZeRO 3 without a pipeline: fine


def test_every_engine_has_traits_and_search_keeps_only_what_it_runs():
    assert set(ENGINE_TRAITS) == set(ENGINES)
    mask = ENGINE_REGISTRY["deepspeed"].allows(np.array(["1f1b", "gpipe", "1f1b", "1f1b"], dtype=object),
                                               np.array([4, 4, 1, 4]), np.array([1, 1, 3, 2]))  # fmt: skip
    assert mask.tolist() == [True, False, True, False]
    result = search("llama2-7b", 32, hardware=H100, global_batch_size=64, top=5, engine="deepspeed")
    frame = result.frame
    assert set(frame["schedule"]) <= {"1f1b"}
    assert not ((frame["pipeline_parallel"] > 1) & (frame["zero_stage"] > 1)).any()
    assert result.training(0).engine == "deepspeed"
    assert result.estimate(0).step(H100).seconds == pytest.approx(frame.loc[0, "seconds"], rel=1e-6)


def test_cli_engine_flag_and_its_refusal():
    base = [sys.executable, "-m", "fastdist_lab.cli", "search", "--model", "llama2-7b", "--gpus", "16",
            "--global-batch-size", "32", "--hardware", H100, "--quiet", "--top", "2"]  # fmt: skip
    bad = subprocess.run(base + ["--engine", "jax"], capture_output=True, text=True)
    assert bad.returncode == 2
    assert bad.stderr.strip().count("\n") == 0 and "engine='jax'" in bad.stderr
    good = subprocess.run(base + ["--engine", "fsdp2"], capture_output=True, text=True)
    assert good.returncode == 0, good.stderr


@pytest.mark.parametrize("engine", ["deepspeed", "fsdp2", "deepspeed-0.3", "deepspeed-0.5", "composer-fsdp"])
def test_the_pruned_search_finds_the_rows_of_the_whole_one_for_every_engine(engine):
    # the floors (search_bounds) and step.lower_bound stay below every engine's simulated step
    limits = dict(hardware=H100, global_batch_size=32, tensor_parallel=(1, 2), micro_batch_size=(1, 2), engine=engine,
                  schedule=("1f1b", "interleaved-1f1b"), recompute="none")  # fmt: skip
    whole = search("llama2-7b", 16, top=None, **limits).frame
    pruned = search("llama2-7b", 16, top=5, **limits).frame
    assert np.allclose(pruned["seconds"].to_numpy(), whole["seconds"].to_numpy()[:5])


def test_cost_command_takes_the_engine_and_refuses_what_it_cannot_run():
    base = [sys.executable, "-m", "fastdist_lab.cli", "cost", "--model", "llama2-7b", "--world-size", "64", "--pp", "4"]
    shown = subprocess.run(base + ["--engine", "deepspeed"], capture_output=True, text=True)
    assert shown.returncode == 0, shown.stderr
    assert "engine deepspeed" in shown.stdout
    for flags, named in ((["--schedule", "gpipe"], "schedule='gpipe'"), (["--zero-stage", "2"], "zero_stage=2")):
        bad = subprocess.run(base + ["--engine", "deepspeed", *flags], capture_output=True, text=True)
        assert bad.returncode == 2 and named in bad.stderr and bad.stderr.strip().count("\n") == 0
    assert "engine" not in subprocess.run(base, capture_output=True, text=True).stdout.split("training:")[1][:120]


def _zero3_on(gpus: int, engine: str, zero: int = 3):
    layout = Layout(world_size=gpus, local_world_size=8)
    training = Training(zero_stage=zero, num_microbatches=1, engine=engine)
    return estimate(layout, Transformer.preset("gpt3-1.3b"), training).step("a100-sxm-80gb")


def test_deepspeed_2021_zero3_copies_grow_with_the_data_parallel_size_at_a_fixed_per_gpu_batch():
    # DeepSpeed v0.3.15: per parameter tensor and collective, one copy kernel per rank of the data group (PyTorch
    # 1.8's list all_gather / reduce_scatter), behind torch.cuda.synchronize(): 24 layers x 12 tensors x 3
    # collectives (forward gather, backward gather, reduce-scatter) x n ranks x Efficiency.kernel_overhead_s
    kernel = Efficiency().kernel_overhead_s
    for small, large in ((64, 128), (128, 256)):
        old = _zero3_on(large, "deepspeed-0.3").parts["data_comm_seconds"]
        old -= _zero3_on(small, "deepspeed-0.3").parts["data_comm_seconds"]
        new = _zero3_on(large, "deepspeed").parts["data_comm_seconds"]
        new -= _zero3_on(small, "deepspeed").parts["data_comm_seconds"]
        assert old - new == pytest.approx(24 * 12 * 3 * (large - small) * kernel, rel=1e-6)
        assert 0 <= new < 0.01 < old  # today's DeepSpeed gathers into one flat buffer: no per-rank copies
    # the copies are ZeRO 3's: ZeRO 1 is priced as today's DeepSpeed
    assert _zero3_on(256, "deepspeed-0.3", zero=1).seconds == pytest.approx(_zero3_on(256, "deepspeed", zero=1).seconds)
    assert ENGINE_TRAITS["deepspeed-0.3"].rank_copies == 1 and ENGINE_TRAITS["deepspeed"].rank_copies == 0


def test_deepspeed_2021_refusals_name_the_value():
    with pytest.raises(CostError, match="engine='deepspeed-0.3' runs ZeRO stage 1 at most with a pipeline"):
        _report(1, 4, 3, 8, engine="deepspeed-0.3")
    with pytest.raises(CostError, match="engine='deepspeed-0.2'"):
        Training(engine="deepspeed-0.2")


def _fsdp_step(engine: str, seq_length: int, hidden: int, recompute: str = "none", compiled: bool = False):
    model = Transformer(num_layers=4, hidden_size=hidden, num_attention_heads=hidden // 128,
                        num_query_groups=hidden // 512, ffn_hidden_size=3 * hidden, vocab_size=32000,
                        seq_length=seq_length, swiglu=True)  # fmt: skip
    layout = Layout(world_size=8, local_world_size=8)
    training = Training(zero_stage=3, micro_batch_size=1, engine=engine, recompute=recompute, torch_compile=compiled)
    return estimate(layout, model, training).step(H100).parts


def _unfused_seconds(seq_length: int, hidden: int) -> float:
    # the same FSDP overlap, element-wise work eager (fsdp2, torchtitan) against fused (composer-fsdp)
    eager, fused = _fsdp_step("fsdp2", seq_length, hidden), _fsdp_step("composer-fsdp", seq_length, hidden)
    return (eager["forward_seconds"] + eager["backward_seconds"]) - (
        fused["forward_seconds"] + fused["backward_seconds"]
    )


def test_unfused_elementwise_time_grows_with_sequence_times_hidden_and_is_zero_for_fused_engines():
    # torchtitan's eager Llama (d4c86e3758): per token and layer 84 h + 10 f + 24 (a + g) d bytes forward (RMSNorm
    # as 6 kernels in fp32, SwiGLU, RoPE through complex fp32, repeat_kv) against Megatron's fused 22 h + 6 f
    llama = Transformer.preset("llama3-8b")
    assert elementwise_bytes(llama, np.float64(4096), 1, False) == (610304.0, 28)
    assert elementwise_bytes(llama, np.float64(4096), 1, True) == (176128.0, 6)
    # a fixed cost per kernel, then bytes in proportion to sequence x hidden
    grown = {(s, h): _unfused_seconds(s, h) for s in (1024, 2048, 4096) for h in (2048, 4096)}
    per_sequence = grown[2048, 2048] - grown[1024, 2048]
    assert grown[1024, 2048] > 0 and per_sequence > 0
    assert grown[4096, 2048] - grown[2048, 2048] == pytest.approx(2 * per_sequence, rel=0.02)
    assert grown[2048, 4096] - grown[1024, 4096] == pytest.approx(2 * per_sequence, rel=0.02)
    assert not ENGINE_TRAITS["fsdp2"].fused_elementwise
    assert all(ENGINE_TRAITS[name].fused_elementwise for name in ENGINES if name != "fsdp2")
    # the op policy of torchtitan's selective recompute saves GEMM and attention outputs only: the element-wise
    # kernels run again in the backward; fused engines recompute nothing with flash attention
    assert _fsdp_step("fsdp2", 1024, 2048, "selective")["recompute_seconds"] > 0
    assert _fsdp_step("composer-fsdp", 1024, 2048, "selective")["recompute_seconds"] == 0
    assert _fsdp_step("megatron", 1024, 2048, "selective")["recompute_seconds"] == 0


@given(heads=st.integers(1, 16).map(lambda n: 8 * n), tp=st.sampled_from([1, 2, 4, 8]), swiglu=st.booleans())
@settings(max_examples=40, deadline=None)
def test_unfused_elementwise_bytes_exceed_the_fused_ones(heads, tp, swiglu):
    model = Transformer(num_layers=2, hidden_size=heads * 128, num_attention_heads=heads, num_query_groups=8,
                        ffn_hidden_size=4 * heads * 128, vocab_size=32000, seq_length=1024, swiglu=swiglu)  # fmt: skip
    width = np.float64(model.hidden_size / tp)
    eager, fused = elementwise_bytes(model, width, tp, False), elementwise_bytes(model, width, tp, True)
    assert eager[0] > 3 * fused[0] and eager[1] > fused[1]


def test_a_misspelt_engine_is_reported_by_name():
    with pytest.raises(CostError, match="engine='composer_fsdp' must be one of .*composer-fsdp"):
        Training(engine="composer_fsdp")


def _llama_setups(engine: str, recompute: str, tp: int = 1, model: Transformer | None = None):
    layout = Layout(world_size=8, local_world_size=8, tensor_parallel=tp)
    training = Training(engine=engine, recompute=recompute, micro_batch_size=2)
    return estimate(layout, model or Transformer.preset("llama3-8b"), training).setups


def test_the_op_policy_recomputes_wk_wo_and_w3_a_third_of_the_linear_flops():
    # torchtitan d4c86e3758 _custom_policy: every second aten.mm of a block is not saved. A Llama block calls wq, wk,
    # wv, wo, w1, w3, w2: wk, wo and w3 run again, 36% of Llama 3.1 8B's linear FLOPs (4096 x 1024 + 4096^2 +
    # 4096 x 14336 of 2 x 4096^2 + 2 x 4096 x 1024 + 3 x 4096 x 14336).
    h, kv, f = 4096, 1024, 14336
    assert (h * kv + h * h + h * f) / (2 * h * h + 2 * h * kv + 3 * h * f) == pytest.approx(0.365, abs=0.001)
    hw, eff = Hardware.coerce(H100), Efficiency()
    setups = _llama_setups("fsdp2", "selective")
    tokens = setups.tokens * setups.micro_batch_size
    wk, wo, w3 = gemm(tokens, kv, h, hw, eff), gemm(tokens, h, h, hw, eff), gemm(tokens, f, h, hw, eff)
    assert second_mm_seconds(setups, hw, eff) == pytest.approx(wk + wo + w3)


def test_only_fsdp2s_selective_recompute_runs_the_gemms_again(monkeypatch):
    assert [n for n in ENGINES if ENGINE_TRAITS[n].recompute_every_second_mm] == ["fsdp2"]
    hw, eff = Hardware.coerce(H100), Efficiency()
    recompute = {(engine, r): layer_times(_llama_setups(engine, r), hw, eff)["recompute"]
                 for engine in ("fsdp2", "composer-fsdp", "megatron") for r in ("selective", "full")}  # fmt: skip
    setups = _llama_setups("fsdp2", "selective")
    fsdp2 = ENGINE_REGISTRY["fsdp2"]
    changed = dataclasses.replace(fsdp2.traits, recompute_every_second_mm=False)
    monkeypatch.setitem(ENGINE_REGISTRY, "fsdp2", dataclasses.replace(fsdp2, traits=changed))  # what Training takes
    without = _llama_setups("fsdp2", "selective")
    assert layer_times(without, hw, eff)["recompute"] == 0  # without the op policy: Megatron's selective, flash
    # the op policy runs again every element-wise kernel (eager: one per op) and every second mm
    tokens = setups.tokens * setups.micro_batch_size
    moved, kernels = elementwise_bytes(setups.model, np.float64(setups.model.hidden_size), 1, False)
    elementwise = streamed(tokens * moved, kernels, hw, eff)
    assert recompute["fsdp2", "selective"] == pytest.approx(elementwise + second_mm_seconds(setups, hw, eff))
    assert recompute["composer-fsdp", "selective"] == recompute["megatron", "selective"] == 0
    full = layer_times(_llama_setups("fsdp2", "full"), hw, eff)
    assert recompute["fsdp2", "full"] == pytest.approx(full["forward"])  # the whole forward, nothing more


@given(heads=st.integers(1, 8).map(lambda n: 8 * n), tp=st.sampled_from([1, 2, 4, 8]), swiglu=st.booleans())
@settings(max_examples=30, deadline=None)
def test_every_second_mm_follows_the_blocks_call_order(heads, tp, swiglu):
    model = Transformer(num_layers=2, hidden_size=heads * 128, num_attention_heads=heads, num_query_groups=8,
                        ffn_hidden_size=4 * heads * 128, vocab_size=32000, seq_length=1024, swiglu=swiglu)  # fmt: skip
    hw, eff = Hardware.coerce(H100), Efficiency()
    setups = _llama_setups("fsdp2", "selective", tp, model)
    tokens, h, f, kv = setups.tokens * setups.micro_batch_size, model.hidden_size, model.ffn_hidden_size, 8 * 128
    wk, wo = gemm(tokens, kv // tp, h, hw, eff), gemm(tokens, h, h // tp, hw, eff)
    third = gemm(tokens, f // tp, h, hw, eff) if swiglu else gemm(tokens, h, f // tp, hw, eff)  # w3, else w2
    assert second_mm_seconds(setups, hw, eff) == pytest.approx(wk + wo + third)


@pytest.mark.parametrize(("old_engine", "engine"), [("deepspeed-0.5", "deepspeed"), ("megatron-2021", "megatron")])
@given(st.sampled_from([1, 2, 4, 8]), st.sampled_from([1, 4]), st.integers(min_value=4, max_value=32))
@settings(max_examples=20, deadline=None)
def test_older_code_waits_for_its_tensor_backward_all_reduces_and_nothing_else(old_engine, engine, tp, pp, m):
    # Megatron-DeepSpeed of 2021-22 and Megatron-LM of Narayanan et al. 2021 (copy_to_tensor_model_parallel_region,
    # before the asynchronous all-reduce): the input gradient's all-reduce follows the linear's backward; everything
    # else is today's engine, but Megatron-LM of 2021's gradient accumulation, a pass of its own (the fusion came in
    # 2022), which lengthens the backward
    old = _report(tp, pp, 1, m, engine=old_engine).step(H100)
    new = _report(tp, pp, 1, m, engine=engine).step(H100)
    fused = ENGINE_TRAITS[old_engine].fused_accumulation == ENGINE_TRAITS[engine].fused_accumulation
    if tp == 1 and fused:
        assert old.seconds == pytest.approx(new.seconds) and old.parts == pytest.approx(new.parts)
    else:
        assert old.seconds > new.seconds
        if tp > 1:
            assert old.parts["tensor_comm_seconds"] > new.parts["tensor_comm_seconds"]
        for part in ("forward_seconds", "recompute_seconds"):
            assert old.parts[part] == pytest.approx(new.parts[part]), part
        if fused:
            assert old.parts["backward_seconds"] == pytest.approx(new.parts["backward_seconds"])
        else:
            assert old.parts["backward_seconds"] > new.parts["backward_seconds"]
        # an overlapped data-parallel reduction (Megatron's) hides behind the backward the all-reduces lengthen
        assert old.parts["data_comm_seconds"] <= new.parts["data_comm_seconds"] + 1e-12
    differs = [f.name for f in dataclasses.fields(EngineTraits)
               if getattr(ENGINE_TRAITS[engine], f.name) != getattr(ENGINE_TRAITS[old_engine], f.name)]  # fmt: skip
    assert differs == ["tensor_backward_hidden"] + ([] if fused else ["fused_accumulation"])
    assert ENGINE_TRAITS[engine].tensor_backward_hidden
    if engine == "deepspeed":
        with pytest.raises(CostError, match="engine='deepspeed-0.5' runs schedule '1f1b' only"):
            _report(tp, 4, 1, m, engine=old_engine, schedule="interleaved-1f1b")
    else:
        _report(tp, 4, 1, 8, engine=old_engine, schedule="interleaved-1f1b", virtual_pipeline_stages=2)  # runs


def test_narayanans_runs_are_priced_for_megatron_2021_and_its_band_pools_with_megatron():
    narayanan = [run for run in PUBLISHED_RUNS if run.source.startswith("Narayanan et al. 2021")]
    assert len(narayanan) == 22
    assert {run.engine for run in narayanan} == {"megatron-2021", "deepspeed-0.3"}  # Table 2's ZeRO-3 rows
    assert {run.engine for run in PUBLISHED_RUNS if run.source.startswith("Korthikanti")} == {"megatron"}
    assert band_engines("megatron") == band_engines("megatron-2021")[::-1] == ("megatron", "megatron-2021")
    assert band_engines("deepspeed") == ("deepspeed",)  # its 2021-22 versions do not vouch for it
    today = band_for("megatron", "ampere", "tp+pp+dp", 1024)
    assert today.validated and {r.run for r in TRUST_RUNS if r.engine == "megatron-2021"} & set(today.runs)


def test_torch_compile_fuses_fsdp2s_elementwise_work_and_changes_nothing_else():
    # torchtitan's --training.compile (Inductor fuses each block's element-wise ops): priced as Megatron's fused
    # kernels; its op policy still runs them again in the backward, fused
    eager, compiled = _fsdp_step("fsdp2", 2048, 4096, "selective"), _fsdp_step("fsdp2", 2048, 4096, "selective", True)
    assert compiled["forward_seconds"] < eager["forward_seconds"]
    assert compiled["backward_seconds"] < eager["backward_seconds"]
    assert 0 < compiled["recompute_seconds"] < eager["recompute_seconds"]
    assert compiled["tensor_comm_seconds"] == eager["tensor_comm_seconds"]
    assert compiled["data_comm_seconds"] == pytest.approx(eager["data_comm_seconds"])
    # the element-wise kernels cost what a fused engine's do: composer-fsdp (fused, no op policy) forwards alike
    composer = _fsdp_step("composer-fsdp", 2048, 4096, "selective")
    assert compiled["forward_seconds"] == pytest.approx(composer["forward_seconds"])
    # engines whose kernels are fused already: nothing changes
    for engine in ("megatron", "composer-fsdp", "deepspeed"):
        assert _fsdp_step(engine, 2048, 4096, "full", True) == _fsdp_step(engine, 2048, 4096, "full"), engine
    assert Training().torch_compile is False
    with pytest.raises(CostError, match="torch_compile='yes'"):
        Training(torch_compile="yes")


def test_torch_compile_in_search_and_on_the_command_line():
    limits = dict(hardware=H100, global_batch_size=32, tensor_parallel=(1, 2), micro_batch_size=(1, 2),
                  engine="fsdp2", recompute="full")  # fmt: skip
    whole = search("llama2-7b", 16, top=None, torch_compile=True, **limits)
    pruned = search("llama2-7b", 16, top=5, torch_compile=True, **limits)
    assert np.allclose(pruned.frame["seconds"].to_numpy(), whole.frame["seconds"].to_numpy()[:5])
    assert pruned.training(0).torch_compile
    assert pruned.estimate(0).step(H100).seconds == pytest.approx(pruned.frame.loc[0, "seconds"], rel=1e-6)
    eager = search("llama2-7b", 16, top=5, **limits)
    assert pruned.frame.loc[0, "seconds"] < eager.frame.loc[0, "seconds"]
    base = [sys.executable, "-m", "fastdist_lab.cli", "cost", "--model", "llama2-7b", "--world-size", "8",
            "--engine", "fsdp2", "--hardware", H100]  # fmt: skip
    shown = [subprocess.run(base + flag, capture_output=True, text=True) for flag in ([], ["--torch-compile"])]
    assert [run.returncode for run in shown] == [0, 0], shown[1].stderr
    assert shown[0].stdout != shown[1].stdout
    assert "engine fsdp2, torch.compile" in shown[1].stdout and "torch.compile" not in shown[0].stdout


def test_an_engine_without_fused_accumulation_adds_each_micro_batchs_gradients_in_a_pass_of_its_own():
    # Megatron-LM of 2021 (main_grad.add_ in its DDP hook) and DeepSpeed under ZeRO 0/1 (AccumulateGrad): one
    # element-wise kernel per parameter tensor reading the new gradient and the accumulator, writing the sum; today's
    # Megatron-LM accumulates inside the weight-gradient GEMM. One stage, tensor 1: nothing else differs.
    model, hardware = Transformer.preset("llama2-7b"), Hardware.preset(H100)
    layout = Layout(world_size=256, local_world_size=8)
    steps = {}
    for engine in ("megatron", "megatron-2021"):
        for grad in (2, 4):
            training = Training(num_microbatches=4, engine=engine, bytes_per_gradient=grad, overlap_data_parallel=False)
            steps[engine, grad] = estimate(layout, model, training).step(hardware)
    parameters = model.parameters()
    for grad in (2, 4):
        old, new = steps["megatron-2021", grad].parts, steps["megatron", grad].parts
        extra = old["backward_seconds"] - new["backward_seconds"]
        moved = parameters * (2 + 2 * grad)  # bf16 gradient read, the accumulator read and written
        kernels = model.num_layers * block_tensors(model)
        expected = moved / (hardware.memory_GBps * 1e9 * DEFAULT_EFFICIENCY.memory_efficiency)
        expected += kernels * DEFAULT_EFFICIENCY.kernel_overhead_s
        assert extra == pytest.approx(4 * expected, rel=0.02)  # each of the 4 micro-batches (embeddings aside)
        assert old["forward_seconds"] == new["forward_seconds"]
    assert steps["megatron-2021", 4].seconds > steps["megatron-2021", 2].seconds
    # ZeRO 2 and 3 reduce each micro-batch's gradients and accumulate shards: no whole pass to price
    for zero in (2, 3):
        plain = _report(1, 1, zero, 4).step(H100)
        unfused = _report(1, 1, zero, 4, engine="megatron-2021").step(H100)
        assert unfused.parts["backward_seconds"] == pytest.approx(plain.parts["backward_seconds"])
    unfused = [name for name in ENGINES if not ENGINE_TRAITS[name].fused_accumulation]
    assert unfused == ["deepspeed", "deepspeed-0.3", "deepspeed-0.5", "megatron-2021"]
