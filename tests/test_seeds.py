"""generator_seeds and Layout.seed_table: exact seeds for one rank and for the whole world."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from fastdist_lab import DistributedConfig, Layout, LayoutError, PhaseType
from fastdist_lab.config import MAX_SEED
from fastdist_lab.seeds import GENERATORS, generator_seeds

EXAMPLE = dict(world_size=16, local_world_size=8, tensor_parallel=2, pipeline_parallel=2, sequence_data_parallel=2)


def spec_seeds(c: DistributedConfig, step: int, phase: PhaseType) -> dict[str, int]:
    """The spec's formulas, written out once more independently, for comparison."""
    pp_base = c.seed + c.dp_seed_shift * c.data_rank + c.pp_seed_shift * c.pipeline_rank
    tp_base = pp_base + c.tp_seed_shift * c.tensor_rank
    pp_init = (c.seed if c.reproducible_init else pp_base) + c.pp_gen_init_seed_shift
    tp_init = (c.seed if c.reproducible_init else tp_base) + c.tp_gen_init_seed_shift
    phase_shift = {
        PhaseType.training: c.train_seed_shift,
        PhaseType.validation: c.valid_seed_shift,
        PhaseType.test: c.test_seed_shift,
        PhaseType.inference: c.test_seed_shift,
    }[phase]
    shift = step * c.sample_seed_shift + phase_shift
    return {
        "default_cpu": pp_init % MAX_SEED,
        "pp_init": pp_init % MAX_SEED,
        "tp_init": tp_init % MAX_SEED,
        "pp": ((pp_base + c.pp_gen_seed_shift) % MAX_SEED + shift) % MAX_SEED,
        "tp": ((tp_base + c.tp_gen_seed_shift) % MAX_SEED + shift) % MAX_SEED,
    }


def test_example_rank_seeds():
    c = DistributedConfig(rank=5, **EXAMPLE)
    seeds = generator_seeds(c)
    assert list(seeds) == list(GENERATORS)
    assert seeds == spec_seeds(c, 0, PhaseType.training)
    assert all(0 <= v < MAX_SEED for v in seeds.values())


@pytest.mark.parametrize("phase", ["training", "VALIDATION", "Test", PhaseType.inference])
@pytest.mark.parametrize("step", [0, 1, 17, 10**6])
def test_seed_table_equals_per_rank_seeds(step, phase):
    layout = Layout(**EXAMPLE, seed=-5, reproducible_init=False)
    table = layout.seed_table(step, phase)
    assert list(table.columns) == list(GENERATORS)
    for rank in range(16):
        expected = spec_seeds(layout.config(rank), step, PhaseType.parse(phase))
        assert {k: int(v) for k, v in table.loc[rank].items()} == expected
        assert generator_seeds(layout.config(rank), step, phase) == expected


@given(
    seed=st.integers(-(2**80), 2**80),
    step=st.integers(0, 2**40),
    reproducible=st.booleans(),
    pipeline_first=st.booleans(),
    tp_shift=st.integers(-(2**100), 2**100),
    phase=st.sampled_from(list(PhaseType)),
)
def test_vectorised_seeds_are_exact(seed, step, reproducible, pipeline_first, tp_shift, phase):
    layout = Layout(
        **EXAMPLE, seed=seed, reproducible_init=reproducible, pipeline_first=pipeline_first, tp_seed_shift=tp_shift
    )
    table = layout.seed_table(step, phase)
    for rank in (0, 5, 15):
        assert {k: int(v) for k, v in table.loc[rank].items()} == spec_seeds(layout.config(rank), step, phase)


def test_inference_shares_test_shift_and_reproducible_init():
    c = DistributedConfig(rank=5, **EXAMPLE)
    assert generator_seeds(c, 3, "inference") == generator_seeds(c, 3, "test")
    r = Layout(**EXAMPLE, reproducible_init=True).seed_table()
    assert r["pp_init"].nunique() == 1 and r["tp_init"].nunique() == 1


def test_bad_step_and_phase():
    c = DistributedConfig(rank=0, **EXAMPLE)
    with pytest.raises(LayoutError, match="phase"):
        generator_seeds(c, 0, "warmup")
    with pytest.raises(LayoutError, match="step"):
        generator_seeds(c, 1.5)
