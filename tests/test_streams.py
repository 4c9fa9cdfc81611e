"""Generator streams: predictions against per-rank references, the checks, real draws on a gloo cluster, the CLI."""

from __future__ import annotations

import importlib
import json

import numpy as np
import pytest
import torch

from fastdist_lab import Layout
from fastdist_lab.cli import main
from fastdist_lab.config import PhaseType
from fastdist_lab.seeds import GENERATORS, generator_seeds
from fastdist_lab.streams import StreamReport, predict

DEFAULT = {"world_size": 8, "local_world_size": 8, "tensor_parallel": 2, "pipeline_parallel": 2,
           "sequence_data_parallel": 2}  # fmt: skip
PHASES = [phase.name for phase in PhaseType]
STEPS = [0, 1, 7, 10**6]


def layout(**changes: object) -> Layout:
    return Layout(**{**DEFAULT, **changes})


def checks_of(report: StreamReport) -> dict[str, tuple[bool, str]]:
    return {row.check: (row.ok, row.detail) for row in report.check().itertuples(index=False)}


def failing(report: StreamReport) -> dict[str, str]:
    return {name: detail for name, (ok, detail) in checks_of(report).items() if not ok}


def reference_draws(seed: int, draws: int, device: str = "cpu") -> np.ndarray:
    """The naive way: a brand-new generator for one seed."""
    generator = torch.Generator(device=device)
    generator.manual_seed(seed)
    return torch.rand(draws, dtype=torch.float64, generator=generator, device=device).cpu().numpy()


# ---------------------------------------------------------------------- predictions
@pytest.mark.parametrize(
    "fields",
    [
        DEFAULT,
        {**DEFAULT, "pipeline_first": True},
        {"world_size": 48, "local_world_size": 8, "tensor_parallel": 4, "pipeline_parallel": 3},
        {"world_size": 16, "local_world_size": 4, "tensor_parallel": 1, "pipeline_parallel": 2,
         "sequence_data_parallel": 4, "reproducible_init": True, "seed": 2**70 + 5},
    ],
)  # fmt: skip
@pytest.mark.parametrize("phase", PHASES)
def test_predicted_seeds_and_draws_match_a_per_rank_reference(fields: dict, phase: str) -> None:
    lay = Layout(**fields)
    for step in (0, 3):
        report = predict(lay, step, phase, draws=3)
        assert report.seeds.dtype == np.uint64 and report.values.shape == (lay.world_size, 5, 3)
        for rank in range(lay.world_size):
            seeds = generator_seeds(lay.config(rank), step, phase)
            for column, name in enumerate(GENERATORS):
                assert int(report.seeds[rank, column]) == seeds[name]
                assert np.array_equal(report.values[rank, column], reference_draws(seeds[name], 3))


@pytest.mark.parametrize("draws", [1, 4, 16, 113])
def test_closed_form_cpu_draws_equal_torch(draws: int) -> None:
    from fastdist_lab.streams.draws import cpu_draws

    rng = np.random.default_rng(draws)
    seeds = np.concatenate(
        [np.array([0, 1, 2**32 - 1, 2**32, 2**64 - 1], dtype=np.uint64), rng.integers(0, 2**64 - 1, 200, np.uint64)]
    )
    values = cpu_draws(seeds, draws)
    assert values.shape == (seeds.size, draws)
    for seed, row in zip(seeds.tolist(), values):
        assert np.array_equal(row, reference_draws(seed, draws))


def test_closed_form_limits() -> None:
    from fastdist_lab.streams.draws import MT_MAX_DRAWS, cpu_draws

    with pytest.raises(ValueError, match="must be in"):
        cpu_draws(np.zeros(3, np.uint64), MT_MAX_DRAWS + 1)
    # more draws than the closed form covers: predicted with torch, still exact
    report = predict(layout(), 2, "test", draws=MT_MAX_DRAWS + 7)
    for rank in (0, 5):
        seeds = generator_seeds(layout().config(rank), 2, "test")
        assert np.array_equal(report.values[rank, 4], reference_draws(seeds["tp"], MT_MAX_DRAWS + 7))


def test_the_closed_form_is_confirmed_against_torch_and_replaced_when_it_disagrees(monkeypatch, caplog) -> None:
    module = importlib.import_module("fastdist_lab.streams.predict")  # torch is imported: the check runs
    monkeypatch.setattr(module, "_CLOSED_FORM", [])
    good = predict(layout(), 1, "training", draws=3)
    assert module._CLOSED_FORM == [True]
    # a closed form that no longer matches torch's generator is noticed, said, and replaced by torch's draws
    monkeypatch.setattr(module, "_CLOSED_FORM", [])
    monkeypatch.setattr(module, "cpu_draws", lambda seeds, draws: np.zeros((len(seeds), draws)))
    with caplog.at_level("WARNING"):
        again = predict(layout(), 1, "training", draws=3)
    assert module._CLOSED_FORM == [False] and "no longer matches the closed form" in caplog.text
    assert np.array_equal(again.values, good.values)


def test_stream_ids_mean_same_seed_on_same_device() -> None:
    report = predict(layout(), 2, "validation")
    ids, seeds = report.stream_ids.ravel(), report.seeds.ravel()
    same_id = ids[:, None] == ids[None, :]
    same_seed = seeds[:, None] == seeds[None, :]
    assert np.array_equal(same_id, same_seed)  # all on the CPU here
    assert ids[0] == 0 and report.num_streams == ids.max() + 1
    # default_cpu and pp_init share their seed by design, hence their stream
    assert np.array_equal(report.stream_ids[:, 0], report.stream_ids[:, 1])


def test_to_frame_has_one_row_per_rank_and_generator() -> None:
    report = predict(layout(), draws=2)
    frame = report.to_frame()
    assert len(frame) == 8 * 5
    for column in ("rank", "tensor_rank", "data_rank", "pipeline_rank", "generator", "seed", "device", "draws",
                   "stream_id"):  # fmt: skip
        assert column in frame.columns
    row = frame[(frame["rank"] == 5) & (frame["generator"] == "tp")].iloc[0]
    assert int(row["seed"]) == generator_seeds(layout().config(5))["tp"]
    assert row["device"] == "cpu" and len(row["draws"]) == 2
    assert (row["tensor_rank"], row["data_rank"], row["pipeline_rank"]) == (1, 0, 1)


def test_sharing_default_layout() -> None:
    report = predict(layout())
    tensor_groups = [tuple(g) for g in layout().groups("tensor").tolist()]
    assert report.sharing("pp") == tensor_groups == [(0, 1), (2, 3), (4, 5), (6, 7)]
    assert report.sharing("tp") == [(r,) for r in range(8)]
    assert report.sharing("tp_init") == [(r,) for r in range(8)]
    assert report.sharing("pp_init") == tensor_groups
    with pytest.raises(ValueError, match="not one of"):
        report.sharing("dropout")


def test_draws_must_be_positive() -> None:
    with pytest.raises(ValueError, match="draws=0"):
        predict(layout(), draws=0)


# ---------------------------------------------------------------------- checks
CHECK_NAMES = [
    "pp streams shared exactly within each tensor group",
    "tp streams distinct inside every tensor group",
    "pp and tp streams distinct across data ranks",
    "pp and tp streams distinct across pipeline ranks",
    "init generators equal across data and pipeline ranks exactly when reproducible_init",
    "streams change with step and with phase",
    "no two streams that should differ collide anywhere in the world",
    "draws agree with stream ids",
    "note: inference reuses the test phase's streams",
    "note: torch's CPU generator uses only the low 32 bits of a seed",
]


@pytest.mark.parametrize("step", STEPS)
@pytest.mark.parametrize("phase", PHASES)
@pytest.mark.parametrize("reproducible_init", [False, True])
def test_default_layout_passes_every_check(step: int, phase: str, reproducible_init: bool) -> None:
    report = predict(layout(reproducible_init=reproducible_init), step, phase)
    table = report.check()
    assert list(table.columns) == ["check", "ok", "detail"]
    assert list(table["check"]) == CHECK_NAMES
    assert table["ok"].all(), table[~table["ok"]].to_dict(orient="records")
    assert report.ok


def test_broken_tp_shift_fails_the_tensor_check_with_a_clear_detail() -> None:
    report = predict(layout(tp_seed_shift=0))
    failed = failing(report)
    detail = failed["tp streams distinct inside every tensor group"]
    seed = generator_seeds(layout(tp_seed_shift=0).config(0))["tp"]
    assert detail == f"tp streams shared inside tensor group [0, 1]: ranks 0 and 1 both have seed {seed} on cpu"
    assert "no two streams that should differ collide anywhere in the world" in failed
    assert "pp streams shared exactly within each tensor group" not in failed
    assert report.sharing("tp") == [(0, 1), (2, 3), (4, 5), (6, 7)]
    assert not report.ok


def test_broken_dp_shift_fails_the_data_checks() -> None:
    failed = failing(predict(layout(dp_seed_shift=0)))
    assert failed["pp and tp streams distinct across data ranks"].startswith(
        "pp streams shared across data ranks in data group [0, 2]: ranks 0 and 2 both have seed"
    )
    assert failed["pp streams shared exactly within each tensor group"].startswith(
        "tensor groups [0, 1] and [2, 3] share one pp stream"
    )
    assert "pp and tp streams distinct across pipeline ranks" not in failed


def test_broken_pp_shift_fails_the_pipeline_check() -> None:
    failed = failing(predict(layout(pp_seed_shift=0)))
    assert failed["pp and tp streams distinct across pipeline ranks"].startswith(
        "pp streams shared across pipeline ranks in pipeline group [0, 4]: ranks 0 and 4"
    )
    assert "pp and tp streams distinct across data ranks" not in failed


def test_streams_that_do_not_change_with_step_or_phase_fail() -> None:
    no_step = failing(predict(layout(sample_seed_shift=0), 3))
    assert no_step["streams change with step and with phase"].startswith(
        "rank 0's pp stream is the same at step 3 training and at step 4"
    )
    no_phase = failing(predict(layout(valid_seed_shift=DEFAULT_SHIFT("train_seed_shift"))))
    assert "at phase validation" in no_phase["streams change with step and with phase"]
    # the next step lands on another rank's stream: data rank 1 at step 0 replays data rank 0 at step 1
    replay = failing(predict(layout(sample_seed_shift=DEFAULT_SHIFT("dp_seed_shift"))))
    assert replay["streams change with step and with phase"] == (
        "rank 0's pp stream at step 1 is rank 2's pp stream at step 0 training "
        f"(seed {generator_seeds(layout().config(2))['pp']} on cpu)"
    )


def DEFAULT_SHIFT(name: str) -> int:  # noqa: N802 - reads like the constant table
    from fastdist_lab.config import DEFAULT_SEED_SHIFTS

    return DEFAULT_SEED_SHIFTS[name]


def test_cpu_streams_are_identified_by_the_low_32_bits_of_the_seed() -> None:
    # the fact: torch's CPU generator ignores the high 32 bits of a seed
    assert np.array_equal(reference_draws(12345, 4), reference_draws(12345 + 2**32, 4))
    assert not np.array_equal(reference_draws(12345, 4), reference_draws(12346, 4))
    # a tp shift that is a multiple of 2**32 gives distinct seeds but identical CPU streams
    report = predict(layout(tp_seed_shift=2**32 * 977))
    assert report.seeds[0, 4] != report.seeds[1, 4]
    assert np.array_equal(report.values[0, 4], report.values[1, 4])
    detail = failing(report)["tp streams distinct inside every tensor group"]
    assert detail.startswith("tp streams shared inside tensor group [0, 1]: ranks 0 and 1 both have seeds ")
    assert "equal in their low 32 bits" in detail
    ok, note = checks_of(report)[CHECK_NAMES[-1]]
    assert ok and "distinct CPU streams" in note
    # the same seeds on CUDA (Philox reads all 64 bits) are distinct streams: identity only, nothing drawn here
    cuda = StreamReport(report.layout, 0, "training", report.seeds, ("cpu",) + ("cuda",) * 4, report.values)
    assert cuda.sharing("tp") == [(r,) for r in range(8)]
    # a step shift that is a multiple of 2**32 does not change any CPU stream
    no_step = failing(predict(layout(sample_seed_shift=2**40)))
    assert no_step["streams change with step and with phase"].startswith(
        "rank 0's pp stream is the same at step 0 training and at step 1 (seeds "
    ) and no_step["streams change with step and with phase"].endswith(
        "equal in their low 32 bits, the only bits torch's CPU generator uses)"
    )


def test_reproducible_init_on_and_off() -> None:
    on = predict(layout(reproducible_init=True))
    assert on.sharing("pp_init") == [tuple(range(8))]
    assert on.sharing("tp_init") == [tuple(range(8))]
    assert on.sharing("default_cpu") == [tuple(range(8))]
    ok, detail = checks_of(on)[CHECK_NAMES[4]]
    assert ok and detail.startswith("reproducible_init=True")
    off = predict(layout(reproducible_init=False))
    assert off.sharing("pp_init") == [(0, 1), (2, 3), (4, 5), (6, 7)]
    ok, detail = checks_of(off)[CHECK_NAMES[4]]
    assert ok and detail.startswith("reproducible_init=False")


def test_init_check_fails_when_init_streams_disagree_with_the_flag() -> None:
    on = predict(layout(reproducible_init=True))
    seeds = on.seeds.copy()
    seeds[6, GENERATORS.index("tp_init")] += np.uint64(1)
    tampered = StreamReport(on.layout, 0, "training", seeds, on.devices, on.values)
    detail = failing(tampered)[CHECK_NAMES[4]]
    assert detail.startswith("reproducible_init=True but tp_init differs across data/pipeline ranks: rank 0 has seed")
    assert "rank 6 has seed" in detail
    # the draws no longer fit the seeds either
    assert "draws agree with stream ids" in failing(tampered)

    off = predict(layout())
    seeds = off.seeds.copy()
    seeds[:, GENERATORS.index("pp_init")] = seeds[0, GENERATORS.index("pp_init")]
    tampered = StreamReport(off.layout, 0, "training", seeds, off.devices, off.values)
    assert failing(tampered)[CHECK_NAMES[4]].startswith(
        "reproducible_init=False but pp_init streams shared across data ranks in data group [0, 2]"
    )


def test_draws_check_catches_distinct_streams_with_equal_draws() -> None:
    from fastdist_lab.streams.invariants import _equal_rows

    rows = np.array([[0.5, 0.1], [0.2, 0.3], [0.5, 0.2], [0.9, 0.0], [0.5, 0.1]])
    assert _equal_rows(rows) == (0, 4)
    assert _equal_rows(rows[:4]) is None
    report = predict(layout())
    values = report.values.copy()
    values[6, GENERATORS.index("tp")] = values[2, GENERATORS.index("tp")]
    tampered = StreamReport(report.layout, 0, "training", report.seeds, report.devices, values)
    detail = failing(tampered)["draws agree with stream ids"]
    assert detail.startswith("rank 2's tp (seed ") and "and rank 6's tp (seed " in detail
    assert detail.endswith("drew the same values")


def test_inference_reuses_the_test_streams_and_says_so() -> None:
    test = predict(layout(), 5, "test")
    inference = predict(layout(), 5, "inference")
    assert np.array_equal(test.seeds, inference.seeds) and np.array_equal(test.values, inference.values)
    assert not test.matches(inference)  # not the same moment
    ok, detail = checks_of(inference)[CHECK_NAMES[-2]]
    assert ok and "test_seed_shift" in detail


def test_matches_and_diff() -> None:
    a, b = predict(layout(), 1, "training"), predict(layout(), 1, "training")
    assert a.matches(b) and a.diff(b).empty and a.compare(b)["ok"].all()
    values = b.values.copy()
    values[3, GENERATORS.index("pp"), 2] += 1e-12
    other = StreamReport(b.layout, 1, "training", b.seeds, b.devices, values, source="real")
    assert not a.matches(other)
    diff = a.diff(other)
    assert diff[["rank", "generator", "differs"]].to_dict(orient="records") == [
        {"rank": 3, "generator": "pp", "differs": "draws"}
    ]
    assert {"seed_predicted", "seed_real", "draws_predicted", "draws_real"} <= set(diff.columns)
    with pytest.raises(ValueError, match="drew 4 and 2"):
        a.matches(predict(layout(), 1, draws=2))


def test_a_large_world_is_predicted_and_checked() -> None:
    big = Layout(world_size=2**16, local_world_size=8, tensor_parallel=8, pipeline_parallel=4,
                 sequence_data_parallel=2)  # fmt: skip
    report = predict(big, 3, "validation")
    assert report.ok
    # tp and tp_init per rank, pp and pp_init (= default_cpu) per tensor group
    assert report.num_streams == 2 * 2**16 + 2 * 2**13
    assert len(report.sharing("pp")) == 2**13


# ---------------------------------------------------------------------- CLI
def test_cli_streams_default_layout(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["streams", "--step", "2", "--phase", "validation"]) == 0
    out = capsys.readouterr().out
    assert "pp           4 streams: [0 1] [2 3] [4 5] [6 7]" in out
    assert "FAIL" not in out


def test_cli_streams_broken_shift_exits_1(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["streams", "--seed-shift", "tp_seed_shift=0"]) == 1
    out = capsys.readouterr().out
    assert "FAIL  tp streams distinct inside every tensor group: tp streams shared inside tensor group [0, 1]" in out


def test_cli_streams_json(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["streams", "--format", "json", "--draws", "2", "--reproducible-init"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["ok"] is True
    assert doc["sharing"]["pp_init"] == [list(range(8))]
    assert [row["check"] for row in doc["checks"]] == CHECK_NAMES


def test_cli_streams_bad_shift_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["streams", "--seed-shift", "nope=1"]) == 2
    assert "'nope' is not a seed shift" in capsys.readouterr().err


# ---------------------------------------------------------------------- real draws on an 8-rank gloo cluster
@pytest.fixture(scope="module")
def cluster(gloo):
    """The session's 8-rank gloo cluster (tests/conftest.py); every test applies its layout first."""
    return gloo


@pytest.mark.parametrize(
    "fields",
    [DEFAULT, {**DEFAULT, "pipeline_first": True, "reproducible_init": True}],
    ids=["default", "pipeline_first-reproducible_init"],
)
def test_real_draws_equal_the_prediction_exactly(cluster, fields: dict) -> None:
    from fastdist_lab.checks import draw_streams as draw

    lay = Layout(**fields)
    assert cluster.apply(lay).ok
    for step, phase in [(0, "training"), (1, "training"), (7, "validation"), (3, "test"), (3, "inference")]:
        real = draw(cluster, step, phase)
        predicted = predict(lay, step, phase)
        assert real.source == "real" and real.devices == ("cpu",) * 5
        assert real.matches(predicted) and predicted.matches(real)
        assert predicted.diff(real).empty
        assert np.array_equal(real.values, predicted.values) and np.array_equal(real.seeds, predicted.seeds)
        assert np.array_equal(real.stream_ids, predicted.stream_ids)
        assert real.ok
        assert list(real.origins[0]) == ["untouched", "untouched", "untouched", "set_step", "set_step"]
        assert "origin" in real.to_frame().columns


def test_real_broken_shift_fails_the_same_check(cluster) -> None:
    from fastdist_lab.checks import draw_streams as draw

    lay = layout(tp_seed_shift=0)
    assert cluster.apply(lay).ok
    real = draw(cluster, 2, "training")
    assert real.matches(predict(lay, 2, "training"))
    assert failing(real)["tp streams distinct inside every tensor group"].startswith(
        "tp streams shared inside tensor group [0, 1]: ranks 0 and 1 both have seed"
    )


def test_draw_leaves_the_workers_generators_alone(cluster) -> None:
    from fastdist_lab.checks import draw_streams as draw

    assert cluster.apply(layout()).ok

    def use_generators(ctx):
        torch.rand(5)  # torch's default generator, seeded by Distributed like pp_init
        ctx.distributed.set_step(4, "test")
        torch.rand(3, generator=ctx.distributed.pp_generator)
        return ctx.distributed.pp_generator.get_state(), ctx.distributed.tp_generator.get_state()

    def states(ctx):
        return ctx.distributed.pp_generator.get_state(), ctx.distributed.tp_generator.get_state()

    before = cluster.run(use_generators).values
    real = draw(cluster, 0, "training")
    after = cluster.run(states).values
    for (pp_a, tp_a), (pp_b, tp_b) in zip(before, after):
        assert torch.equal(pp_a, pp_b) and torch.equal(tp_a, tp_b)
    # the default generator was used: its first draws come from a twin seeded with its own initial_seed()
    assert set(real.origins[:, 0]) == {"initial_seed"}
    assert real.matches(predict(layout(), 0, "training"))


def test_compare_streams(cluster) -> None:
    from fastdist_lab.checks import compare_streams
    from fastdist_lab.streams import comparison_text

    assert cluster.apply(layout()).ok
    frame = compare_streams(cluster, 5, "validation", draws=2)
    assert frame.attrs["matches"] is True
    assert len(frame) == 40 and frame["ok"].all()
    assert {"seed_predicted", "seed_real", "draws_predicted", "draws_real", "differs"} <= set(frame.columns)
    assert comparison_text(frame) == (
        "generator streams, real vs predicted (step 5, validation): all 40 (rank, generator) streams match exactly"
    )
    broken = frame.copy()
    broken.loc[3, "ok"], broken.loc[3, "differs"] = False, "draws"
    text = comparison_text(broken)
    assert text.startswith("generator streams, real vs predicted (step 5, validation): 1 of 40")
    assert "draws" in text.splitlines()[-1]


def test_cli_streams_real(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["streams", "--real", "--backend", "gloo", "--step", "1"]) == 0
    out = capsys.readouterr().out
    assert "real vs predicted: all 40 (rank, generator) streams match exactly" in out
    assert "StreamReport(real, world_size=8" in out


def test_the_streams_spellings_of_one_release_ago_warn_and_serve_the_checks() -> None:
    import fastdist_lab.streams as streams
    from fastdist_lab import checks

    with pytest.warns(DeprecationWarning, match=r"fastdist_lab.streams.draw is deprecated: use .*checks.draw_streams"):
        assert streams.draw is checks.draw_streams
    with pytest.warns(DeprecationWarning, match=r"streams.compare_on_cluster is deprecated: use .*compare_streams"):
        from fastdist_lab.streams import compare_on_cluster
    assert compare_on_cluster is checks.compare_streams
    assert "draw" not in dir(streams) and "compare_on_cluster" not in dir(streams)
