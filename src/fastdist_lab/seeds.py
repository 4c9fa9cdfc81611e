"""The integers each random generator is seeded with, and which seeds give one and the same random stream.

Seeds follow ServiceNow's Fast-LLM (``Distributed.__init__`` / ``set_step`` in
``fast_llm/engine/distributed/distributed.py`` at commit 91b28fab); the formulas and default shifts are written out
in docs/formulas.md, "Seeds and generators". Pure Python for one rank (exact big-int arithmetic, then
``% MAX_SEED``); numpy ``uint64`` for a whole world, which is exact too because reduction modulo 2**64 commutes with
+ and *.

**Stream identity** (``stream_key``, ``stream_ids``): a stream is what a torch generator produces after
``manual_seed(seed)`` on one device type. The same seed on the same device type gives the same numbers (CPU and
CUDA generators differ), and only the part of the seed the device's generator reads counts: torch's CPU
generator (mt19937) keeps the **low 32 bits** of its 64-bit seed, CUDA's Philox the whole seed. Every
question "do these two ranks share a stream?" in this project is answered here.
"""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np

from .config import MAX_SEED, DistributedConfig, PhaseType
from .errors import LayoutError
from .validation import check_int

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


def step_note(step: int) -> str | None:
    """Words for a step whose seeds repeat an earlier step's (steps >= 2**64 wrap around), else ``None``."""
    if step >= MAX_SEED:
        return f"step {step} gives the seeds of step {step % MAX_SEED}: the seed arithmetic of Fast-LLM is modulo 2**64"
    return None


def check_step(step: object) -> int:
    """``step`` as a non-negative int; ``LayoutError`` otherwise. Warns when the step wraps around (``step_note``)."""
    value = check_int("step", step)
    if value < 0:
        raise LayoutError(f"step={value} must be >= 0 (training steps count from 0)")
    note = step_note(value)
    if note is not None:
        warnings.warn(note, stacklevel=3)
    return value


def generator_seeds(config: DistributedConfig, step: int = 0, phase: PhaseType | str = "training") -> dict[str, int]:
    """The seed of each generator of ``config``'s rank after ``Distributed.set_step(step, phase)``.

    Keys: ``default_cpu``, ``pp_init``, ``tp_init``, ``pp``, ``tp``; values in ``[0, MAX_SEED)``.
    """
    step = check_step(step)
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
    step = check_step(step)

    def u64(value: int) -> np.uint64:
        return np.uint64(value % MAX_SEED)

    t, d, p = (ranks.astype(np.uint64) for ranks in (tensor_rank, data_rank, pipeline_rank))
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


# ---------------------------------------------------------------------------------------------- stream identity
CPU_SEED_MASK = np.uint64(0xFFFFFFFF)
"""The bits of a seed torch's CPU generator uses (its mt19937 is initialised from the low 32 bits only)."""

DEVICE_TYPES: tuple[str, ...] = ("cpu", "cuda")
"""Device types whose generators this project tells apart."""


def device_type(device: Any) -> str:
    """The device type (``"cpu"``, ``"cuda"``, ...) of a ``torch.device``, a device string or a generator."""
    device = getattr(device, "device", device)
    device = getattr(device, "type", device)
    return str(device).split(":", 1)[0]


def as_uint64(seeds: Any) -> np.ndarray:
    """Seeds (Python ints of any size, or integer arrays) reduced modulo 2**64 as a ``uint64`` array."""
    array = np.asarray(seeds)
    if array.dtype == np.uint64:
        return array
    if array.dtype.kind in "iu":
        return array.astype(np.uint64)
    return np.array([int(v) % MAX_SEED for v in array.ravel()], dtype=np.uint64).reshape(array.shape)


def stream_key(seeds: Any, device: Any) -> np.ndarray:
    """The part of each seed that picks the stream on ``device``: the low 32 bits on the CPU, all 64 elsewhere."""
    keys = as_uint64(seeds)
    return keys & CPU_SEED_MASK if device_type(device) == "cpu" else keys


def stream_keys(seeds: np.ndarray, devices: tuple[str, ...]) -> np.ndarray:
    """``stream_key`` of every (rank, generator) cell of a (rank, generator) seed array, per generator's device."""
    keys = np.array(as_uint64(seeds), dtype=np.uint64, copy=True)
    for column, device in enumerate(devices):
        keys[:, column] = stream_key(keys[:, column], device)
    return keys


def number_streams(keys: np.ndarray, devices: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Number the distinct ``(device, key)`` pairs of equal-shape arrays in order of first appearance.

    ``keys`` is uint64 (stream keys, see ``stream_key``), ``devices`` small integer codes (default: all one
    device). Returns ``(ids, first, count)``: ``ids`` has the input's shape (equal ids = same stream),
    ``first[i]`` is the flat index where stream ``i`` first appears, ``count[i]`` how many cells hold it.
    """
    flat_keys = np.asarray(keys, dtype=np.uint64).ravel()
    flat_devices = np.zeros(flat_keys.size, np.int64) if devices is None else np.asarray(devices).ravel()
    if flat_keys.size == 0:
        return np.zeros(np.shape(keys), np.int64), np.zeros(0, np.int64), np.zeros(0, np.int64)
    order = np.lexsort((flat_keys, flat_devices))
    sorted_keys, sorted_devices = flat_keys[order], flat_devices[order]
    new = np.ones(order.size, dtype=bool)
    new[1:] = (sorted_keys[1:] != sorted_keys[:-1]) | (sorted_devices[1:] != sorted_devices[:-1])
    provisional = np.cumsum(new) - 1
    # lexsort is stable: the first element of each run of equal keys is its smallest flat index.
    first = order[new]
    renumber = np.empty(first.size, dtype=np.int64)
    by_first = np.argsort(first, kind="stable")
    renumber[by_first] = np.arange(first.size, dtype=np.int64)
    ids = np.empty(order.size, dtype=np.int64)
    ids[order] = renumber[provisional]
    return ids.reshape(np.shape(keys)), first[by_first], np.bincount(ids, minlength=first.size)


def stream_ids(seeds: Any, device: Any = "cuda") -> np.ndarray:
    """Per seed, a small id of its stream on ``device``: equal ids share a stream; ids numbered by first appearance."""
    kind = device_type(device)
    if kind not in DEVICE_TYPES:
        raise LayoutError(f"device={device!r}; use one of {', '.join(DEVICE_TYPES)}")
    return number_streams(stream_key(seeds, kind))[0]
