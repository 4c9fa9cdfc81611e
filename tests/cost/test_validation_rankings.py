"""The runs and rankings of issue 27 (item 4): every run and comparison is well-formed, the held-out errors per set and
per kind are what docs/validation.md says (asserted with a margin; the issue's targets are not met yet and the
document says which), ``validate_rankings`` reports hits and misses and the regret, and a broken comparison is
reported as a miss."""

from __future__ import annotations

import dataclasses
from importlib import util
from pathlib import Path

import pytest

from fastdist_lab.cost import (
    DEFAULT_EFFICIENCY,
    ENGINES,
    HARDWARE_PRESETS,
    HELD_OUT_RUNS,
    PUBLISHED_COMPARISONS,
    PUBLISHED_RUNS,
    Hardware,
    PublishedComparison,
    Training,
    error_breakdown,
    error_summary,
    validate,
    validate_rankings,
)
from fastdist_lab.cost.evidence.accuracy import training_of
from fastdist_lab.cost.evidence.published import JEAN_ZAY_ADAPTER_BUSBW_GBPS, JEAN_ZAY_INTER_NODE_GBPS, bloom_run

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "validation.md"


def bench():
    """benchmarks/bench_validation.py as a module (its Markdown is what the document shows)."""
    spec = util.spec_from_file_location("bench_validation", ROOT / "benchmarks" / "bench_validation.py")
    module = util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def table(validated):
    return validated  # validate(), computed once for the session (conftest)


@pytest.fixture(scope="module")
def rankings():
    return validate_rankings()


@pytest.mark.parametrize("run", PUBLISHED_RUNS, ids=lambda run: run.name)
def test_every_run_is_well_formed(run):
    model = run.tensor_parallel * run.pipeline_parallel
    assert run.gpus % model == 0, run.name
    dp = run.gpus // model
    assert run.global_batch_size % dp == 0, run.name
    assert run.engine in ENGINES and run.hardware in HARDWARE_PRESETS
    assert run.seconds > 0 and len(run.source) > 20 and len(run.measured_from) > 10
    training = run.training
    if "micro_batch_size" in training and "num_microbatches" in training:  # the batch adds up
        assert training["micro_batch_size"] * training["num_microbatches"] * dp == run.global_batch_size, run.name
    assert training_of(run, {}).engine == run.engine  # the prediction uses the run's engine


def test_the_new_runs_are_held_out_from_enough_sources_and_kinds(table):
    assert not any(run.calibration for run in HELD_OUT_RUNS) and len(HELD_OUT_RUNS) >= 11
    assert all(any(run is known for known in PUBLISHED_RUNS) for run in HELD_OUT_RUNS)
    summary = error_summary(table)
    assert summary.loc["all", "runs"] >= 40 and summary.loc["all", "sources"] >= 6
    assert summary.loc["calibration", "runs"] == 10  # the calibration set is unchanged
    zero3 = [run for run in HELD_OUT_RUNS if run.training.get("zero_stage") == 3]
    assert max(run.gpus for run in zero3) >= 512  # ZeRO-3 / FSDP at 512+ GPUs
    assert any(run.hardware.startswith("h100") and run.engine == "fsdp2" for run in zero3)  # H100 FSDP
    assert len({run.engine for run in HELD_OUT_RUNS}) >= 2


def test_training_takes_the_engine():
    run = next(run for run in HELD_OUT_RUNS if run.engine == "deepspeed-0.5")
    assert training_of(run, {}) == Training(**run.training, engine="deepspeed-0.5")


def test_a_run_on_a_cluster_with_fewer_network_adapters_is_priced_on_them():
    # BLOOM's layout search ran on Jean Zay: 4 Omni-Path 100 Gb/s adapters per 8-GPU node, through which NCCL 2.10.3
    # reached 40.55 Gb/s of bus bandwidth per adapter (BigScience's all-reduce benchmark): 2.82 GB/s per GPU at line
    # rate, which the model's network efficiency turns back into the measured 2.53 GB/s
    bloom = [run for run in HELD_OUT_RUNS if run.name.startswith("BLOOM")]
    assert bloom and all(run.inter_node_GBps == JEAN_ZAY_INTER_NODE_GBPS for run in bloom)
    assert JEAN_ZAY_ADAPTER_BUSBW_GBPS == pytest.approx(40.55 / 8)
    measured_per_gpu = JEAN_ZAY_ADAPTER_BUSBW_GBPS * 4 / 8
    assert JEAN_ZAY_INTER_NODE_GBPS * DEFAULT_EFFICIENCY.network_efficiency == pytest.approx(measured_per_gpu)
    assert JEAN_ZAY_INTER_NODE_GBPS == pytest.approx(2.816, abs=1e-3)
    assert JEAN_ZAY_INTER_NODE_GBPS < 4 * 100 / 8 / 8  # below the adapters' line rate per GPU
    assert all(run.inter_node_GBps is None for run in PUBLISHED_RUNS if not run.name.startswith("BLOOM"))
    run = max(bloom, key=lambda run: run.gpus // (run.tensor_parallel * run.pipeline_parallel))  # data 24
    assert run.machine().inter_node_GBps == JEAN_ZAY_INTER_NODE_GBPS and run.machine().peak_tflops == 312.0
    on_dgx = dataclasses.replace(run, inter_node_GBps=None)
    assert on_dgx.machine() == Hardware.preset(run.hardware)
    slower, faster = validate([run, on_dgx])["predicted_seconds"]
    assert slower > 1.05 * faster  # its data-parallel reduction crosses nodes on a ninth of the bandwidth


ISSUE_27_FIGURES = {"held out, issue 27 runs": (0.080, 0.230), "held out, issue 21 runs": (0.030, 0.089)}
"""(mean, worst) absolute error as produced today (docs/validation.md); the issue's target is 5% and 12%."""


def test_held_out_errors_are_the_documented_figures(table):
    summary = error_summary(table)
    for name, (mean, worst) in ISSUE_27_FIGURES.items():
        assert summary.loc[name, "mean_abs_error"] == pytest.approx(mean, abs=0.02), name
        assert summary.loc[name, "worst_abs_error"] == pytest.approx(worst, abs=0.03), name
    breakdown = error_breakdown(table)
    assert set(breakdown.index.get_level_values("by")) == {"set", "engine", "family", "kind"}
    assert breakdown.loc[("engine", "deepspeed-0.5"), "mean_error"] < -0.05  # DeepSpeed's pipeline runs too fast
    # DeepSpeed v0.3.15's ZeRO-3 (Narayanan et al. 2021, Table 2): within 22% since its per-rank copies are priced
    assert breakdown.loc[("engine", "deepspeed-0.3"), "worst_abs_error"] == pytest.approx(0.214, abs=0.03)
    assert breakdown.loc[("kind", "dp+zero3"), "worst_abs_error"] < 0.3
    assert breakdown.loc[("engine", "megatron"), "mean_abs_error"] < 0.06
    assert breakdown.loc[("set", "held out"), "runs"] == summary.loc["held out", "runs"]


@pytest.mark.parametrize("comparison", PUBLISHED_COMPARISONS, ids=lambda comparison: comparison.name)
def test_every_comparison_is_well_formed(comparison):
    assert comparison.problems() == []
    assert comparison.kind in ("layout", "set-up") and len(comparison.source) > 20


def test_a_malformed_comparison_is_reported():
    good = PUBLISHED_COMPARISONS[0]
    other = dataclasses.replace(good.runs[1], global_batch_size=good.runs[1].global_batch_size * 2)
    assert "the runs differ in global_batch_size" in " ".join(
        dataclasses.replace(good, runs=(good.runs[0], other)).problems()
    )
    assert dataclasses.replace(good, runs=good.runs[:1]).problems() != []


def test_rankings_are_the_documented_figures(rankings):
    assert len(rankings) >= 8
    layouts = rankings[rankings["kind"] == "layout"]
    assert len(layouts) >= 6
    # as produced today (docs/validation.md): 13 of 15 hits, 9 of 11 on layouts (PTD-P over ZeRO-3 in four of the
    # five of Narayanan et al.'s Table 2: on 384 GPUs ZeRO-3, predicted 7% fast, comes out first), worst regret
    # 10.9% (BLOOM's search); the issue's target is 6 of 8 hits and regret <= 10% in every comparison
    assert int(rankings["hit"].sum()) == 13 and int(layouts["hit"].sum()) == 9
    assert rankings["regret"].max() == pytest.approx(0.109, abs=0.03)
    assert (rankings.loc[rankings["hit"], "regret"] == 0).all()
    assert (rankings.loc[~rankings["hit"], "regret"] > 0).all()


def test_a_hit_and_a_miss_are_reported(rankings):
    hit = rankings[rankings["comparison"].str.startswith("GPT 162.2B")].iloc[0]
    assert hit["hit"] and hit["measured_fastest"] == hit["predicted_fastest"] == "tp8 pp8 dp1" and hit["regret"] == 0
    zero3 = rankings[rankings["comparison"] == "GPT 174.6B on 1,536 A100: PTD-P vs ZeRO-3"].iloc[0]
    assert zero3["hit"] and zero3["predicted_fastest"] == "tp8 pp12 dp16"
    miss = rankings[rankings["comparison"] == "BLOOM search 14336x72 on 384 A100, batch 2016: 6 layouts"].iloc[0]
    assert not miss["hit"] and miss["predicted_fastest"] == "tp8 pp4 dp12 mbs2"
    measured = dict(zip(miss["layouts"].split("; "), miss["measured_seconds"]))
    assert miss["regret"] == pytest.approx(measured["tp8 pp4 dp12 mbs2"] / measured["tp8 pp8 dp6 mbs4"] - 1)


def test_a_comparison_with_swapped_measurements_is_a_miss_with_its_regret(rankings):
    comparison = next(c for c in PUBLISHED_COMPARISONS if c.name.startswith("GPT 162.2B"))
    runs = comparison.runs
    seconds = [run.seconds for run in runs]
    best, worst = seconds.index(min(seconds)), seconds.index(max(seconds))
    swapped = list(runs)
    swapped[best] = dataclasses.replace(runs[best], seconds=seconds[worst])
    swapped[worst] = dataclasses.replace(runs[worst], seconds=seconds[best])
    row = validate_rankings([PublishedComparison(comparison.name, comparison.source, tuple(swapped))]).iloc[0]
    assert not row["hit"]
    assert row["predicted_fastest"] == "tp8 pp8 dp1"  # the model's pick is unchanged, now measured the slowest
    assert row["regret"] == pytest.approx(max(seconds) / min(seconds) - 1)


def test_the_document_shows_the_rankings(rankings):
    module, text = bench(), DOC.read_text()  # (the runs' tables: tests/cost/test_validation.py)
    assert module.rankings_markdown(rankings) in text, (
        "docs/validation.md is stale: python benchmarks/bench_validation.py --write-docs"
    )


def _exploration(name: str, rows: int) -> tuple:
    """The module of ``scripts/<name>.py`` (an exploration of a published table, nothing fitted to it) and what its
    ``errors()`` finds, each of its ``rows`` rows measured and priced."""
    spec = util.spec_from_file_location(name, ROOT / "scripts" / f"{name}.py")
    module = util.module_from_spec(spec)
    spec.loader.exec_module(module)
    found = module.errors()
    assert len(found) == len(module.ROWS) == rows
    assert all(measured > 0 and predicted > 0 for _, measured, predicted in found)
    return module, found


def test_the_llm_foundry_exploration_prices_every_row_of_its_table():
    # scripts/llm_foundry_h100.py (docs/validation.md, "What the model does not capture"): 37 rows, none fitted
    _, found = _exploration("llm_foundry_h100", 37)
    # the five held-out H100 rows are rows of this table, measured and priced alike
    held_out = [run for run in HELD_OUT_RUNS if run.engine == "composer-fsdp" and "H100" in run.name]
    table = validate(held_out)
    for measured, predicted in zip(table["measured_seconds"], table["predicted_seconds"]):
        assert any(m == pytest.approx(measured) and p == pytest.approx(predicted) for _, m, p in found)


def test_the_llm_foundry_exploration_prices_the_a100_table_too():
    # scripts/llm_foundry_h100.py --a100: all 61 rows of the A100 80GB table, none fitted, each priced as the held-out
    # A100 row is (its 70B rows reduce bf16 gradients, PURE: 2 bytes; the others fp32)
    module, _ = _exploration("llm_foundry_h100", 37)
    found = module.errors("a100")
    assert len(found) == len(module.A100_ROWS) == 61
    assert all(measured > 0 and predicted > 0 for _, measured, predicted in found)
    assert {row[-1] for row, _, _ in found} == {2, 4} and all(row[-1] == 2 for row, _, _ in found if row[0] == "70b")
    held_out = [run for run in HELD_OUT_RUNS if run.engine == "composer-fsdp" and "A100" in run.name]
    table = validate(held_out)
    assert len(held_out) == 1
    for measured, predicted in zip(table["measured_seconds"], table["predicted_seconds"]):
        assert any(m == pytest.approx(measured) and p == pytest.approx(predicted) for _, m, p in found)


def test_the_llm_foundry_split_separates_a_cost_per_token_from_a_cost_per_micro_batch():
    # scripts/llm_foundry_h100.py --split (docs/validation.md, "What the model does not capture"): MPT-30B and 70B
    # with full recompute ran at several micro-batch sizes; a token of their work ran faster than priced on H100 and
    # as priced on A100, and on both a micro-batch cost each layer ten-odd milliseconds the model does not price
    module, found = _exploration("llm_foundry_h100", 37)
    split = {(size, recompute): rest for size, _, recompute, *rest in module.split_by_micro_batch(found)}
    assert set(split) >= {("70b", True), ("30b", True)}
    for key in (("70b", True), ("30b", True)):
        sizes, ratio, measured, predicted = split[key]
        assert len(sizes) >= 2 and 0.7 < ratio < 0.85 and measured > 0.01 > 10 * predicted
    a100 = {size: rest for size, _, _, *rest in module.split_by_micro_batch(module.errors("a100"))}
    _, ratio, measured, predicted = a100["70b"]
    assert abs(ratio - 1) < 0.05 and measured > 0.01 > 10 * predicted


def test_the_llm_foundry_split_reports_what_it_is_given():
    # the split is the fit of its input, not of the tables: rows measured as predicted give a ratio of 1 and equal
    # intercepts; a fixed second per micro-batch added to the measurements comes back, per layer, as the intercept
    module, found = _exploration("llm_foundry_h100", 37)
    same = [(row, predicted, predicted) for row, _, predicted in found]
    for *_, ratio, measured, predicted in module.split_by_micro_batch(same):
        assert ratio == pytest.approx(1) and measured == pytest.approx(predicted, abs=1e-9)
    padded = [(row, predicted + 0.48 * row[4], predicted) for row, _, predicted in found]  # 0.48 s x accumulation
    split = {size: rest for size, _, _, *rest in module.split_by_micro_batch(padded)}
    _, ratio, measured, predicted = split["30b"]  # 48 layers: 10 ms a layer more
    assert ratio == pytest.approx(1) and measured - predicted == pytest.approx(0.48 / 48)


def test_the_strong_scaling_exploration_prices_its_ends_as_the_weak_scaling_row():
    # scripts/megatron_strong_scaling.py (docs/validation.md, "What the model does not capture"): the 177B row's
    # model, batch and settings at 96 and 4,608 H100; its step's FLOPs over the stated MFU
    spec = util.spec_from_file_location("megatron_strong_scaling", ROOT / "scripts" / "megatron_strong_scaling.py")
    module = util.module_from_spec(spec)
    spec.loader.exec_module(module)
    row = next(run for run in PUBLISHED_RUNS if run.name == module.ROW)
    ends = module.runs()
    assert [run.gpus for run in ends] == [96, 4608] and not any(run.calibration for run in ends)
    assert all(run.model == row.model and run.global_batch_size == row.global_batch_size == 1152 for run in ends)
    # the same FLOPs a step: seconds x MFU x GPUs is the row's seconds x its TFLOP/s share x its GPUs
    work = row.seconds * module.ROW_TFLOPS / module.PEAK_TFLOPS * row.gpus
    for run, mfu in zip(ends, module.MEASURED_MFU.values()):
        assert run.seconds * mfu * run.gpus == pytest.approx(work)
    found = module.errors()
    assert [gpus for gpus, *_ in found] == [96, 4608]
    # the data-parallel collectives grow with the group: the predicted MFU falls from one end to the other
    assert found[0][2] > found[1][2] and all(abs(error) < 1 for *_, error in found)


def test_the_bloom_exploration_prices_the_chronicles_other_rows_as_the_held_out_ones():
    # scripts/bloom_chronicle.py (docs/validation.md, "What the model does not capture"): 29 earlier rows, none fitted
    _, found = _exploration("bloom_chronicle", 29)
    # the one-node rows hold a single node: no network and no pipeline to price, nothing data-parallel to reduce
    one_node = [row for row, _, _ in found if row[0] == "one node"]
    assert one_node and all(row[6:9] == (1, 8, 1) for row in one_node)
    # the held-out BLOOM rows are made by the same function, so the exploration prices its rows as they are priced
    held_out = [run for run in HELD_OUT_RUNS if run.name.startswith("BLOOM search")]
    assert len(held_out) == 25
    again = bloom_run("GBS Variations and Tweaking TP (02-25)", 14336, 72, True, 2048, 8, 8, 6, 4, 114.11)
    assert again == held_out[0]


def test_the_bloom_split_finds_a_cost_per_layer_and_slot_the_model_misses():
    # scripts/bloom_chronicle.py --split: tensor 8 micro-batch sweeps of DeepSpeed's pipeline engine on A100; a
    # token's work priced within 10%, and each layer's pipeline slot a few to 15 ms dearer than priced
    module, found = _exploration("bloom_chronicle", 29)
    split = module.split_by_micro_batch(found)
    assert len(split) >= 5 and all(len(sizes) >= 2 for *_, sizes, _, _, _ in split)
    assert all(abs(ratio - 1) < 0.1 and measured > predicted + 0.003 for *_, ratio, measured, predicted in split)


def test_the_bloom_split_reports_what_it_is_given():
    # rows measured as predicted: ratio 1, equal costs per slot; 10 ms more a layer and slot: b comes back 10 ms higher
    module, found = _exploration("bloom_chronicle", 29)
    same = [(row, predicted, predicted) for row, _, predicted in found]
    for *_, ratio, measured, predicted in module.split_by_micro_batch(same):
        assert ratio == pytest.approx(1) and measured == pytest.approx(predicted, abs=1e-9)
    padded = []
    for row, _, predicted in found:
        _, _, _, layers, _, batch, dp, _, pp, mbs, _ = row
        padded.append((row, predicted + 0.01 * (batch // (dp * mbs) + pp - 1) * layers / pp, predicted))
    for *_, ratio, measured, predicted in module.split_by_micro_batch(padded):
        assert ratio == pytest.approx(1) and measured - predicted == pytest.approx(0.01)
