"""One rank's view of a parallel layout: sizes, coordinates, named process-group dims and seed fields.

``LayoutFields`` is the one list of a layout's input fields (``Layout`` and ``DistributedConfig`` share it).
Pure Python (no torch, no numpy), so that a layout question is answered in microseconds. The fields, defaults
and formulas are those of ServiceNow's Fast-LLM (``fast_llm/engine/distributed/config.py`` at commit 91b28fab),
bit for bit, without two bugs of that era: a non-contiguous group is a hashable tuple (not a list), and a
``range`` and a ``tuple`` with the same members are one group (see ``runtime.pool``).
"""

from __future__ import annotations

import dataclasses
import enum
import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar

from .dims import DIM_NAMES, MAX_LISTED_MEMBERS, DistributedDim, DistributedDimNames, check_ranks_in_range
from .errors import LayoutError
from .validation import check_flag, check_int, check_number, env_int

__all__ = [
    "DEFAULT_SEED_SHIFTS",
    "DIM_NAMES",
    "INPUT_FIELDS",
    "LAYOUT_FIELDS",
    "MAX_LISTED_MEMBERS",
    "MAX_SEED",
    "SEED_SHIFT_FIELDS",
    "DistributedBackend",
    "DistributedConfig",
    "DistributedDim",
    "DistributedDimNames",
    "LayoutFields",
    "PhaseType",
    "check_ranks_in_range",
]


MAX_SEED = 2**64
"""Generators are seeded modulo this value (torch seeds are unsigned 64-bit)."""


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


class FieldSignature:
    """``cls(**fields)`` as ``help()`` and a notebook's tooltip show it (``inspect.signature`` reads it): every field,
    keyword-only, with its default (``None`` where the environment gives one). Built when first asked for, so that
    importing the package does not import ``inspect``."""

    def __get__(self, instance: Any, owner: type) -> Any:
        import inspect

        keyword = inspect.Parameter.KEYWORD_ONLY
        return inspect.Signature(
            [
                inspect.Parameter(name, keyword, default=None if default is dataclasses.MISSING else default)
                for name, default in field_defaults(owner).items()
            ]
        )


@dataclass(frozen=True, init=False, repr=False)
class LayoutFields:
    """The input fields of a layout, one source for ``Layout`` (the whole world) and ``DistributedConfig`` (one
    rank, which adds ``rank``): Fast-LLM's ``DistributedConfig`` fields and defaults (commit 91b28fab), among them
    the big primes the seeds are shifted by.

    Frozen: a field never changes (``replace`` gives a new value). Both classes validate in their constructor and
    raise one ``LayoutError`` naming every broken rule, and an unknown field with the closest name.
    """

    world_size: int
    local_world_size: int
    tensor_parallel: int = 1
    pipeline_parallel: int = 1
    sequence_data_parallel: int = 1
    sequence_tensor_parallel: bool = False
    pipeline_first: bool = False
    backend: DistributedBackend = DistributedBackend.nccl
    timeout: float = 60.0
    seed: int = 1234
    reproducible_init: bool = False
    dp_seed_shift: int = 317767863445754100075399033823
    pp_seed_shift: int = 811026271858507938190098775099
    pp_gen_seed_shift: int = 500460795349110443334056239993
    pp_gen_init_seed_shift: int = 631112027069964424381239824623
    tp_seed_shift: int = 705275193289568515128435800471
    tp_gen_seed_shift: int = 278779420836085904093221202933
    tp_gen_init_seed_shift: int = 894750739684993243926471979237
    sample_seed_shift: int = 751127116949963770353413160199
    train_seed_shift: int = 938219878163699459065752841447
    valid_seed_shift: int = 683552447587140661489672773353
    test_seed_shift: int = 220111337975202516901860145957

    __signature__ = FieldSignature()  # not a field: no annotation

    def _assign(self, values: dict[str, Any]) -> None:
        """Check ``values`` (any field left out takes its default) and set them, or raise one ``LayoutError``
        naming every broken rule with its field(s) and numbers."""
        fields = field_defaults(type(self))
        unknown = [name for name in values if name not in fields]
        if unknown:
            raise _unknown_fields(type(self).__name__, unknown, tuple(fields))
        values = {**fields, **values}
        errors: list[str] = []
        out: dict[str, Any] = {}
        for name, checker, options in FIELD_CHECKS if "rank" in fields else FIELD_CHECKS[:-1]:
            try:
                out[name] = checker(name, values[name], **options)
            except LayoutError as error:
                errors.append(str(error))
                out[name] = None
        try:
            out["backend"] = DistributedBackend.parse(values["backend"])
        except LayoutError as error:
            errors.append(str(error))
        world, local = out["world_size"], out["local_world_size"]
        tp, pp, sdp = out["tensor_parallel"], out["pipeline_parallel"], out["sequence_data_parallel"]
        rank = out.get("rank")
        # Without a valid world size every rule below is meaningless: say only what is wrong with it.
        if world is not None and rank is not None and not 0 <= rank < world:
            errors.append(f"rank={rank} must be in [0, world_size={world})")
        if world is not None and local is not None and world % local:
            errors.append(f"local_world_size={local} must divide world_size={world}")
        if world is not None and local is not None and tp is not None and local % tp:
            errors.append(f"tensor_parallel={tp} must divide local_world_size={local}")
        if world is not None and tp is not None and pp is not None:
            if world % (tp * pp):
                errors.append(
                    f"tensor_parallel={tp} * pipeline_parallel={pp} = {tp * pp} must divide world_size={world}"
                )
            elif sdp is not None and (world // (tp * pp)) % sdp:
                errors.append(
                    f"sequence_data_parallel={sdp} must divide data_parallel={world // (tp * pp)} "
                    f"(world_size={world} / (tensor_parallel={tp} * pipeline_parallel={pp}))"
                )
        if errors:
            raise LayoutError("; ".join(errors))
        if tp == 1:
            out["sequence_tensor_parallel"] = False
        self.__dict__.update(out)  # frozen: the one place the fields are set

    def fields(self) -> dict[str, Any]:
        """The input fields (as given or defaulted), suitable for ``type(self)(**fields)``."""
        return {name: getattr(self, name) for name in field_defaults(type(self))}

    def replace(self, **changes: Any) -> Any:
        """A new value of the same class with ``changes`` applied to these fields (validated like the constructor)."""
        return type(self)(**{**self.fields(), **changes})

    def __reduce__(self) -> tuple[Any, tuple[()]]:
        """Pickle the fields only (derived values and cached tables are rebuilt): layouts travel to workers."""
        return functools.partial(type(self), **self.fields()), ()


@functools.cache
def field_defaults(cls: type) -> dict[str, Any]:
    """Each field of a ``LayoutFields`` class with its default (``dataclasses.MISSING`` where the constructor picks
    one), in declaration order: read once per class."""
    return {field.name: field.default for field in dataclasses.fields(cls)}


def _unknown_fields(owner: str, names: list[str], valid: tuple[str, ...]) -> LayoutError:
    from difflib import get_close_matches  # only on an error: the core stays fast to import

    parts = []
    for name in sorted(map(str, names)):
        if name == "rank":
            parts.append("rank (a Layout holds every rank; use layout.config(rank) for one)")
            continue
        close = get_close_matches(name, valid, n=1, cutoff=0.5)
        parts.append(f"{name} (did you mean {close[0]}?)" if close else name)
    return LayoutError(f"{owner} got unexpected field(s): {', '.join(parts)}")


DEFAULT_SEED_SHIFTS: dict[str, int] = {
    field.name: field.default for field in dataclasses.fields(LayoutFields) if field.name.endswith("_seed_shift")
}
"""The big primes the original framework shifts its seeds by, keyed by field name."""

SEED_SHIFT_FIELDS: tuple[str, ...] = tuple(DEFAULT_SEED_SHIFTS)
"""Names of the seed-shift fields, in the spec's order."""

POSITIVE_INT_FIELDS = (
    "world_size",
    "local_world_size",
    "tensor_parallel",
    "pipeline_parallel",
    "sequence_data_parallel",
)
"""The sizes: integers > 0."""

FIELD_CHECKS: tuple[tuple[str, Callable[..., Any], dict[str, Any]], ...] = (
    *((name, check_int, {"minimum": 1}) for name in POSITIVE_INT_FIELDS),
    *((name, check_int, {}) for name in ("seed", *SEED_SHIFT_FIELDS)),
    *((name, check_flag, {}) for name in ("sequence_tensor_parallel", "pipeline_first", "reproducible_init")),
    ("timeout", check_number, {"unit": "seconds"}),
    ("rank", check_int, {}),  # last: a Layout has no rank
)
"""How each field is checked (``backend`` is parsed by ``DistributedBackend.parse``)."""


@dataclass(frozen=True, init=False)
class DistributedConfig(LayoutFields):
    """One rank's distributed configuration: validated at construction, every derived value computed.

    Field names, defaults and formulas are those of the original framework (see the spec): every ``LayoutFields``
    field and ``rank``; ``world_size``, ``rank`` and ``local_world_size`` default to torchrun's ``WORLD_SIZE``,
    ``RANK`` and ``LOCAL_WORLD_SIZE`` (else 1, 0, 1). Invalid input raises ``LayoutError`` naming the field(s) and
    the numbers. ``distributed_dims`` maps each of the nine dim names to its ``DistributedDim``.
    """

    rank: int
    reference_config: ClassVar[DistributedConfig | None] = None

    def __init__(self, **fields: Any):
        for name, default in (("world_size", self.default_world_size), ("rank", self.default_rank)):
            if fields.get(name) is None:
                fields[name] = default()
        if fields.get("local_world_size") is None:
            fields["local_world_size"] = self.default_local_world_size()
        self._assign(fields)
        self._derive()

    # Defaults read from the environment (torchrun's variables), at construction time.
    @staticmethod
    def default_world_size() -> int:
        """``WORLD_SIZE`` from the environment, else 1."""
        return env_int("WORLD_SIZE", 1)

    @staticmethod
    def default_rank() -> int:
        """``RANK`` from the environment, else 0."""
        return env_int("RANK", 0)

    @staticmethod
    def default_local_world_size() -> int:
        """``LOCAL_WORLD_SIZE`` from the environment, else 1."""
        return env_int("LOCAL_WORLD_SIZE", 1)

    def _derive(self) -> None:
        """Set the derived values (read-only like the fields): sizes, this rank's coordinates, its nine dims."""
        tp, pp, sdp, rank = self.tensor_parallel, self.pipeline_parallel, self.sequence_data_parallel, self.rank
        data_parallel = self.world_size // (tp * pp)
        if self.pipeline_first:
            data_rank, pipeline_rank = (rank // tp) // pp, (rank // tp) % pp
        else:
            data_rank, pipeline_rank = (rank // tp) % data_parallel, (rank // tp) // data_parallel
        derived = {
            "model_parallel": tp * pp,
            "data_parallel": data_parallel,
            "batch_data_parallel": data_parallel // sdp,
            "num_nodes": self.world_size // self.local_world_size,
            "local_rank": rank % self.local_world_size,
            "tensor_rank": rank % tp,
            "data_rank": data_rank,
            "pipeline_rank": pipeline_rank,
            "sequence_data_rank": data_rank % sdp,
            "batch_data_rank": data_rank // sdp,
        }
        self.__dict__.update(derived)  # read-only like the fields
        pairs = self.dim_pairs()
        self.__dict__["distributed_dims"] = {
            name: DistributedDim.from_sizes_and_strides(name, rank, dim_pairs) for name, dim_pairs in pairs.items()
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
        tp, pp = self.tensor_parallel, self.pipeline_parallel
        sdp, bdp = self.sequence_data_parallel, self.batch_data_parallel
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

    def log_first_rank(self, message: str, level: int = 20) -> None:
        """Log ``message`` on global rank 0 only (``level`` 20 is ``logging.INFO``), with this module's logger."""
        if self.rank == 0:
            import logging  # only where ranks run: the core stays fast to import

            logging.getLogger(__name__).log(level, message)

    def __repr__(self) -> str:
        return (
            f"DistributedConfig(world_size={self.world_size}, rank={self.rank}, "
            f"local_world_size={self.local_world_size}, tensor_parallel={self.tensor_parallel}, "
            f"pipeline_parallel={self.pipeline_parallel}, sequence_data_parallel={self.sequence_data_parallel}, "
            f"pipeline_first={self.pipeline_first}, backend={self.backend.value!r}, seed={self.seed})"
        )


INPUT_FIELDS: tuple[str, ...] = tuple(field.name for field in dataclasses.fields(DistributedConfig))
"""Every input field of ``DistributedConfig``, in declaration order (``rank`` last)."""

LAYOUT_FIELDS: tuple[str, ...] = tuple(field.name for field in dataclasses.fields(LayoutFields))
"""Every input field of a ``Layout``: those of ``DistributedConfig`` except ``rank``."""
