"""The integers each random generator is seeded with, for one rank or for a whole world at once.

Pure Python for one rank (exact big-int arithmetic, then ``% MAX_SEED``); numpy ``uint64`` for a whole
world, which is exact too because reduction modulo 2**64 commutes with + and *.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .config import MAX_SEED, DistributedConfig, PhaseType

if TYPE_CHECKING:
    import numpy as np

GENERATORS: tuple[str, ...] = ("default_cpu", "pp_init", "tp_init", "pp", "tp")
"""The generators the original ``Distributed`` seeds, in the order it seeds them."""

_PHASE_SHIFT_FIELD = {
    PhaseType.training: "train_seed_shift",
    PhaseType.validation: "valid_seed_shift",
    PhaseType.test: "test_seed_shift",
    PhaseType.inference: "test_seed_shift",  # the original reuses the test shift for inference
}


def phase_shift(config: DistributedConfig, phase: PhaseType | str) -> int:
    """The seed shift of ``phase`` (inference shares the test phase's shift, as in the original)."""
    return getattr(config, _PHASE_SHIFT_FIELD[PhaseType.parse(phase)])


def _check_step(step: object) -> int:
    from .config import LayoutError

    if isinstance(step, bool) or not hasattr(step, "__index__"):
        raise LayoutError(f"step={step!r} must be an integer")
    return step.__index__()  # type: ignore[union-attr]


def generator_seeds(config: DistributedConfig, step: int = 0, phase: PhaseType | str = "training") -> dict[str, int]:
    """The seed of each generator of ``config``'s rank after ``Distributed.set_step(step, phase)``.

    Keys: ``default_cpu``, ``pp_init``, ``tp_init``, ``pp``, ``tp``; values in ``[0, MAX_SEED)``.
    """
    step = _check_step(step)
    c = config
    pp_base = c.seed + c.dp_seed_shift * c.data_rank + c.pp_seed_shift * c.pipeline_rank
    tp_base = pp_base + c.tp_seed_shift * c.tensor_rank
    pp_init = (c.seed if c.reproducible_init else pp_base) + c.pp_gen_init_seed_shift
    tp_init = (c.seed if c.reproducible_init else tp_base) + c.tp_gen_init_seed_shift
    shift = step * c.sample_seed_shift + phase_shift(c, phase)
    pp_seed = (pp_base + c.pp_gen_seed_shift) % MAX_SEED
    tp_seed = (tp_base + c.tp_gen_seed_shift) % MAX_SEED
    return {
        "default_cpu": pp_init % MAX_SEED,
        "pp_init": pp_init % MAX_SEED,
        "tp_init": tp_init % MAX_SEED,
        "pp": (pp_seed + shift) % MAX_SEED,
        "tp": (tp_seed + shift) % MAX_SEED,
    }


def seed_arrays(
    fields: dict,
    tensor_rank: np.ndarray,
    data_rank: np.ndarray,
    pipeline_rank: np.ndarray,
    step: int = 0,
    phase: PhaseType | str = "training",
) -> dict[str, np.ndarray]:
    """Vectorised ``generator_seeds`` over arrays of coordinates: exact ``uint64`` arrays keyed by generator.

    ``fields`` holds the seed fields (``seed``, ``reproducible_init`` and the shifts) as in a config.
    """
    import numpy as np

    step = _check_step(step)

    def u64(value: int) -> np.uint64:
        return np.uint64(value % MAX_SEED)

    t = tensor_rank.astype(np.uint64)
    d = data_rank.astype(np.uint64)
    p = pipeline_rank.astype(np.uint64)
    with np.errstate(over="ignore"):
        seed = u64(fields["seed"])
        pp_base = seed + u64(fields["dp_seed_shift"]) * d + u64(fields["pp_seed_shift"]) * p
        tp_base = pp_base + u64(fields["tp_seed_shift"]) * t
        if fields["reproducible_init"]:
            pp_init = np.full_like(pp_base, seed + u64(fields["pp_gen_init_seed_shift"]))
            tp_init = np.full_like(tp_base, seed + u64(fields["tp_gen_init_seed_shift"]))
        else:
            pp_init = pp_base + u64(fields["pp_gen_init_seed_shift"])
            tp_init = tp_base + u64(fields["tp_gen_init_seed_shift"])
        phase_field = _PHASE_SHIFT_FIELD[PhaseType.parse(phase)]
        shift = u64(step * fields["sample_seed_shift"] + fields[phase_field])
        pp = pp_base + u64(fields["pp_gen_seed_shift"]) + shift
        tp = tp_base + u64(fields["tp_gen_seed_shift"]) + shift
    return {"default_cpu": pp_init.copy(), "pp_init": pp_init, "tp_init": tp_init, "pp": pp, "tp": tp}
