"""One rank's view of a parallel layout: sizes, coordinates, named process-group dims and seed fields.

Pure Python (no torch, no numpy), so that a layout question is answered in microseconds. The fields, defaults
and formulas are those of ServiceNow's Fast-LLM (``fast_llm/engine/distributed/config.py`` at commit 91b28fab),
bit for bit, without two bugs of that era: a non-contiguous group is a hashable tuple (not a list), and a
``range`` and a ``tuple`` with the same members are one group (see ``runtime.pool``).
"""

from __future__ import annotations

import enum
import logging
import math
import numbers
import operator
import os
from typing import Any

from .dims import (
    DIM_NAMES,
    MAX_LISTED_MEMBERS,
    DistributedDim,
    DistributedDimNames,
    LayoutError,
    check_ranks_in_range,
)

__all__ = [
    "DEFAULT_SEED_SHIFTS",
    "DIM_NAMES",
    "INPUT_FIELDS",
    "MAX_LISTED_MEMBERS",
    "MAX_SEED",
    "SEED_SHIFT_FIELDS",
    "DistributedBackend",
    "DistributedConfig",
    "DistributedDim",
    "DistributedDimNames",
    "LayoutError",
    "PhaseType",
    "check_ranks_in_range",
    "validate_fields",
]

logger = logging.getLogger(__name__)

MAX_SEED = 2**64
"""Generators are seeded modulo this value (torch seeds are unsigned 64-bit)."""

DEFAULT_SEED_SHIFTS: dict[str, int] = {
    "dp_seed_shift": 317767863445754100075399033823,
    "pp_seed_shift": 811026271858507938190098775099,
    "pp_gen_seed_shift": 500460795349110443334056239993,
    "pp_gen_init_seed_shift": 631112027069964424381239824623,
    "tp_seed_shift": 705275193289568515128435800471,
    "tp_gen_seed_shift": 278779420836085904093221202933,
    "tp_gen_init_seed_shift": 894750739684993243926471979237,
    "sample_seed_shift": 751127116949963770353413160199,
    "train_seed_shift": 938219878163699459065752841447,
    "valid_seed_shift": 683552447587140661489672773353,
    "test_seed_shift": 220111337975202516901860145957,
}
"""The big primes the original framework shifts its seeds by, keyed by field name."""

SEED_SHIFT_FIELDS: tuple[str, ...] = tuple(DEFAULT_SEED_SHIFTS)
"""Names of the seed-shift fields, in the spec's order."""


class PhaseType(str, enum.Enum):
    """The phase a step belongs to; each phase shifts the per-step generator seeds differently."""

    training = "Training"
    validation = "Validation"
    test = "Test"
    inference = "Inference"

    @classmethod
    def parse(cls, value: PhaseType | str) -> PhaseType:
        """Accept a ``PhaseType``, its name or its value, in any case; else raise ``LayoutError``."""
        if isinstance(value, cls):
            return value
        if isinstance(value, str):
            key = value.strip().lower()
            for phase in cls:
                if key in (phase.name, phase.value.lower()):
                    return phase
        names = ", ".join(p.name for p in cls)
        raise LayoutError(f"phase={value!r} is not a phase; use one of {names}")


CLUSTER_MODES: tuple[str, ...] = ("processes", "threads", "fake")
"""What may run a world's ranks (``runtime.open_cluster``): one OS process per rank, or one process simulating
them with torch's threaded process groups (real collectives) or its fake ones (membership only)."""


class DistributedBackend(str, enum.Enum):
    """The torch.distributed backend the process groups use."""

    nccl = "nccl"
    gloo = "gloo"

    @classmethod
    def parse(cls, value: DistributedBackend | str) -> DistributedBackend:
        """Accept a ``DistributedBackend`` or its name in any case; else raise ``LayoutError``."""
        if isinstance(value, cls):
            return value
        if isinstance(value, str) and value.strip().lower() in cls.__members__:
            return cls[value.strip().lower()]
        raise LayoutError(f"backend={value!r} is not a backend; use 'nccl' or 'gloo'")


def _env_int(name: str, default: int) -> int:
    raw = os.environ.get(name)
    if raw is None or raw.strip() == "":
        return default
    try:
        return int(raw)
    except ValueError:
        raise LayoutError(f"environment variable {name}={raw!r} is not an integer") from None


def _as_int(name: str, value: Any, errors: list[str]) -> int | None:
    if isinstance(value, bool):
        errors.append(f"{name}={value!r} must be an integer, not a bool")
        return None
    try:
        return operator.index(value)
    except TypeError:
        errors.append(f"{name}={value!r} must be an integer")
        return None


def _as_bool(name: str, value: Any, errors: list[str]) -> bool:
    if isinstance(value, bool):
        return value
    if type(value).__name__ == "bool_":  # numpy.bool_ without importing numpy
        return bool(value)
    if isinstance(value, int) and value in (0, 1):
        return bool(value)
    errors.append(f"{name}={value!r} must be True or False")
    return False


class DistributedConfig:
    """One rank's distributed configuration: validated at construction, every derived value computed.

    Field names, defaults and formulas are those of the original framework (see the spec). Invalid input
    raises ``LayoutError`` naming the field(s) and the numbers. ``distributed_dims`` maps each of the nine
    dim names to its ``DistributedDim``.
    """

    reference_config: DistributedConfig | None = None

    def __init__(
        self,
        *,
        world_size: int | None = None,
        rank: int | None = None,
        local_world_size: int | None = None,
        tensor_parallel: int = 1,
        pipeline_parallel: int = 1,
        sequence_data_parallel: int = 1,
        sequence_tensor_parallel: bool = False,
        pipeline_first: bool = False,
        backend: DistributedBackend | str = DistributedBackend.nccl,
        timeout: float = 60,
        seed: int = 1234,
        reproducible_init: bool = False,
        dp_seed_shift: int = DEFAULT_SEED_SHIFTS["dp_seed_shift"],
        pp_seed_shift: int = DEFAULT_SEED_SHIFTS["pp_seed_shift"],
        pp_gen_seed_shift: int = DEFAULT_SEED_SHIFTS["pp_gen_seed_shift"],
        pp_gen_init_seed_shift: int = DEFAULT_SEED_SHIFTS["pp_gen_init_seed_shift"],
        tp_seed_shift: int = DEFAULT_SEED_SHIFTS["tp_seed_shift"],
        tp_gen_seed_shift: int = DEFAULT_SEED_SHIFTS["tp_gen_seed_shift"],
        tp_gen_init_seed_shift: int = DEFAULT_SEED_SHIFTS["tp_gen_init_seed_shift"],
        sample_seed_shift: int = DEFAULT_SEED_SHIFTS["sample_seed_shift"],
        train_seed_shift: int = DEFAULT_SEED_SHIFTS["train_seed_shift"],
        valid_seed_shift: int = DEFAULT_SEED_SHIFTS["valid_seed_shift"],
        test_seed_shift: int = DEFAULT_SEED_SHIFTS["test_seed_shift"],
    ):
        fields: dict[str, Any] = {
            "world_size": self.default_world_size() if world_size is None else world_size,
            "rank": self.default_rank() if rank is None else rank,
            "local_world_size": self.default_local_world_size() if local_world_size is None else local_world_size,
            "tensor_parallel": tensor_parallel,
            "pipeline_parallel": pipeline_parallel,
            "sequence_data_parallel": sequence_data_parallel,
            "sequence_tensor_parallel": sequence_tensor_parallel,
            "pipeline_first": pipeline_first,
            "backend": backend,
            "timeout": timeout,
            "seed": seed,
            "reproducible_init": reproducible_init,
            "dp_seed_shift": dp_seed_shift,
            "pp_seed_shift": pp_seed_shift,
            "pp_gen_seed_shift": pp_gen_seed_shift,
            "pp_gen_init_seed_shift": pp_gen_init_seed_shift,
            "tp_seed_shift": tp_seed_shift,
            "tp_gen_seed_shift": tp_gen_seed_shift,
            "tp_gen_init_seed_shift": tp_gen_init_seed_shift,
            "sample_seed_shift": sample_seed_shift,
            "train_seed_shift": train_seed_shift,
            "valid_seed_shift": valid_seed_shift,
            "test_seed_shift": test_seed_shift,
        }
        for name, value in validate_fields(fields, with_rank=True).items():
            object.__setattr__(self, name, value)
        self._derive()

    # Defaults read from the environment (torchrun's variables), at construction time.
    @staticmethod
    def default_world_size() -> int:
        """``WORLD_SIZE`` from the environment, else 1."""
        return _env_int("WORLD_SIZE", 1)

    @staticmethod
    def default_rank() -> int:
        """``RANK`` from the environment, else 0."""
        return _env_int("RANK", 0)

    @staticmethod
    def default_local_world_size() -> int:
        """``LOCAL_WORLD_SIZE`` from the environment, else 1."""
        return _env_int("LOCAL_WORLD_SIZE", 1)

    def _derive(self) -> None:
        tp, pp, sdp = self.tensor_parallel, self.pipeline_parallel, self.sequence_data_parallel
        rank = self.rank
        self.model_parallel = tp * pp
        self.data_parallel = self.world_size // self.model_parallel
        self.batch_data_parallel = self.data_parallel // sdp
        self.num_nodes = self.world_size // self.local_world_size
        self.local_rank = rank % self.local_world_size
        self.tensor_rank = rank % tp
        if self.pipeline_first:
            self.data_rank = (rank // tp) // pp
            self.pipeline_rank = (rank // tp) % pp
        else:
            self.data_rank = (rank // tp) % self.data_parallel
            self.pipeline_rank = (rank // tp) // self.data_parallel
        self.sequence_data_rank = self.data_rank % sdp
        self.batch_data_rank = self.data_rank // sdp
        self.distributed_dims = {
            name: DistributedDim.from_sizes_and_strides(name, rank, pairs) for name, pairs in self.dim_pairs().items()
        }

    @property
    def sequence_data_stride(self) -> int:
        """Rank distance between neighbours of a sequence-data group."""
        return self.tensor_parallel * (self.pipeline_parallel if self.pipeline_first else 1)

    @property
    def batch_data_stride(self) -> int:
        """Rank distance between neighbours of a batch-data group."""
        return self.sequence_data_stride * self.sequence_data_parallel

    @property
    def pipeline_stride(self) -> int:
        """Rank distance between neighbouring pipeline stages."""
        return self.tensor_parallel * (1 if self.pipeline_first else self.data_parallel)

    def dim_pairs(self) -> dict[str, list[tuple[int, int]]]:
        """The (size, stride) pairs of each named dim, in the spec's order."""
        tp, pp, sdp, bdp = (
            self.tensor_parallel,
            self.pipeline_parallel,
            self.sequence_data_parallel,
            self.batch_data_parallel,
        )
        sds, bds, ps = self.sequence_data_stride, self.batch_data_stride, self.pipeline_stride
        if self.pipeline_first:
            model_and_sequence_data = [(tp, 1), (pp, ps), (sdp, sds)]
        else:
            model_and_sequence_data = [(tp, 1), (sdp, sds), (pp, ps)]
        return {
            DistributedDimNames.world: [(self.world_size, 1)],
            DistributedDimNames.data: [(sdp, sds), (bdp, bds)],
            DistributedDimNames.pipeline: [(pp, ps)],
            DistributedDimNames.tensor: [(tp, 1)],
            DistributedDimNames.sequence_data: [(sdp, sds)],
            DistributedDimNames.batch_data: [(bdp, bds)],
            DistributedDimNames.tensor_and_sequence_data: [(tp, 1), (sdp, sds)],
            DistributedDimNames.tensor_and_data: [(tp, 1), (sdp, sds), (bdp, bds)],
            DistributedDimNames.model_and_sequence_data: model_and_sequence_data,
        }

    def fields(self) -> dict[str, Any]:
        """The input fields (as given or defaulted), suitable for ``DistributedConfig(**fields)``."""
        return {name: getattr(self, name) for name in INPUT_FIELDS}

    def coordinates(self) -> dict[str, int]:
        """This rank's node, local rank and parallel coordinates."""
        return {
            "rank": self.rank,
            "node": self.rank // self.local_world_size,
            "local_rank": self.local_rank,
            "tensor_rank": self.tensor_rank,
            "data_rank": self.data_rank,
            "pipeline_rank": self.pipeline_rank,
            "sequence_data_rank": self.sequence_data_rank,
            "batch_data_rank": self.batch_data_rank,
        }

    def log_first_rank(self, message: str, level: int = logging.INFO) -> None:
        """Log ``message`` on global rank 0 only."""
        if self.rank == 0:
            logger.log(level, message)

    def __setattr__(self, name: str, value: Any) -> None:
        if name in INPUT_FIELDS:
            raise AttributeError(f"DistributedConfig.{name} is read-only; build a new config")
        object.__setattr__(self, name, value)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, DistributedConfig):
            return NotImplemented
        return self.fields() == other.fields()

    def __hash__(self) -> int:
        return hash(tuple(self.fields().items()))

    def __repr__(self) -> str:
        return (
            f"DistributedConfig(world_size={self.world_size}, rank={self.rank}, "
            f"local_world_size={self.local_world_size}, tensor_parallel={self.tensor_parallel}, "
            f"pipeline_parallel={self.pipeline_parallel}, sequence_data_parallel={self.sequence_data_parallel}, "
            f"pipeline_first={self.pipeline_first}, backend={self.backend.value!r}, seed={self.seed})"
        )


INPUT_FIELDS: tuple[str, ...] = (
    "world_size",
    "rank",
    "local_world_size",
    "tensor_parallel",
    "pipeline_parallel",
    "sequence_data_parallel",
    "sequence_tensor_parallel",
    "pipeline_first",
    "backend",
    "timeout",
    "seed",
    "reproducible_init",
    *SEED_SHIFT_FIELDS,
)
"""Every input field of ``DistributedConfig``, in declaration order."""

_POSITIVE_INT_FIELDS = (
    "world_size",
    "local_world_size",
    "tensor_parallel",
    "pipeline_parallel",
    "sequence_data_parallel",
)


def validate_fields(fields: dict[str, Any], *, with_rank: bool) -> dict[str, Any]:
    """Check and normalise the input fields of a config (``rank`` only when ``with_rank``).

    Returns the normalised values; raises ``LayoutError`` listing every violated rule, each naming its
    field(s) and numbers. Shared by ``DistributedConfig`` and ``Layout`` so both say the same thing.
    """
    errors: list[str] = []
    out: dict[str, Any] = {}
    for name in _POSITIVE_INT_FIELDS:
        value = _as_int(name, fields[name], errors)
        if value is not None and value <= 0:
            errors.append(f"{name}={value} must be > 0")
            value = None
        out[name] = value
    for name in ("seed", *SEED_SHIFT_FIELDS):
        out[name] = _as_int(name, fields[name], errors)
    for name in ("sequence_tensor_parallel", "pipeline_first", "reproducible_init"):
        out[name] = _as_bool(name, fields[name], errors)
    try:
        out["backend"] = DistributedBackend.parse(fields["backend"])
    except LayoutError as error:
        errors.append(str(error))
    timeout = fields["timeout"]
    if isinstance(timeout, bool) or not isinstance(timeout, numbers.Real):
        errors.append(f"timeout={timeout!r} must be a number of seconds")
    elif not (timeout > 0 and math.isfinite(timeout)):
        errors.append(f"timeout={timeout!r} must be a finite number of seconds > 0")
    else:
        out["timeout"] = float(timeout)
    if with_rank:
        out["rank"] = _as_int("rank", fields["rank"], errors)

    world, local = out["world_size"], out["local_world_size"]
    tp, pp, sdp = out["tensor_parallel"], out["pipeline_parallel"], out["sequence_data_parallel"]
    # Without a valid world size every rule below is meaningless: say only what is wrong with it.
    if world is not None and with_rank and out["rank"] is not None and not 0 <= out["rank"] < world:
        errors.append(f"rank={out['rank']} must be in [0, world_size={world})")
    if world is not None and local is not None and world % local:
        errors.append(f"local_world_size={local} must divide world_size={world}")
    if world is not None and local is not None and tp is not None and local % tp:
        errors.append(f"tensor_parallel={tp} must divide local_world_size={local}")
    if world is not None and tp is not None and pp is not None:
        if world % (tp * pp):
            errors.append(f"tensor_parallel={tp} * pipeline_parallel={pp} = {tp * pp} must divide world_size={world}")
        elif sdp is not None and (world // (tp * pp)) % sdp:
            errors.append(
                f"sequence_data_parallel={sdp} must divide data_parallel={world // (tp * pp)} "
                f"(world_size={world} / (tensor_parallel={tp} * pipeline_parallel={pp}))"
            )
    if errors:
        raise LayoutError("; ".join(errors))
    if tp == 1:
        out["sequence_tensor_parallel"] = False
    return out
