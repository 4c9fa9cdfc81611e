"""The cells of a world's generator streams (``StreamCells``) and the invariants they are checked against,
vectorised over the whole world.

Each check returns one row ``{"check", "ok", "detail"}``; a failing detail names the ranks, the generators
and the seed. What "should" share a stream is Fast-LLM's design (commit 91b28fab; ``docs/formulas.md``):
pp streams are shared by the ranks of a tensor group, every tp stream is its rank's own, and the init
generators (and torch's default CPU generator, seeded like ``pp_init``) are shared across data and pipeline
ranks exactly when ``reproducible_init`` is set.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..config import PhaseType
from ..formatting import members_text, plural
from ..layout import Layout
from ..seeds import GENERATORS, number_streams, stream_key, stream_keys


class StreamCells:
    """The seed, device and first draws of every generator of every rank, with their stream ids: what the invariants
    below read, and the base of ``StreamReport``.

    ``seeds`` is a ``uint64`` array (rank, generator), ``devices`` one device type per generator and
    ``values`` a float64 array (rank, generator, draw). ``source`` says where the numbers come from
    (``"predicted"`` or ``"real"``); ``origins``, for real reports, says per cell which state the draws
    were taken from (see ``fastdist_lab.streams.real``). Two (rank, generator) cells share a stream id exactly
    when their generators produce identical numbers: the same device type and the same seed, as far as that
    device's generator reads it (torch's CPU generator uses only the low 32 bits; see ``streams.draws``).
    """

    def __init__(
        self,
        layout: Layout,
        step: int,
        phase: PhaseType | str,
        seeds: np.ndarray,
        devices: tuple[str, ...],
        values: np.ndarray,
        source: str = "predicted",
        generators: tuple[str, ...] = GENERATORS,
        origins: np.ndarray | None = None,
        numbering: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None,
    ):
        self.layout = layout
        self.step = int(step)
        self.phase = PhaseType.parse(phase)
        self.generators = tuple(generators)
        self.seeds = np.asarray(seeds, dtype=np.uint64)
        self.devices = tuple(devices)
        self.values = np.asarray(values, dtype=np.float64)
        self.source = source
        self.origins = None if origins is None else np.asarray(origins, dtype=object)
        world, count = layout.world_size, len(self.generators)
        cells = f"{world} ranks x {count} generators"
        if self.seeds.shape != (world, count) or len(self.devices) != count:
            raise ValueError(f"seeds of shape {self.seeds.shape} and {len(self.devices)} devices do not fit {cells}")
        if self.origins is not None and self.origins.shape != self.seeds.shape:
            raise ValueError(f"origins of shape {self.origins.shape} do not fit {cells}")
        if self.values.ndim != 3 or self.values.shape[:2] != (world, count):
            raise ValueError(f"values of shape {self.values.shape} do not fit {cells}")
        if numbering is None:
            names = sorted(set(self.devices))
            codes = np.array([names.index(d) for d in self.devices], dtype=np.int64)
            numbering = number_streams(stream_keys(self.seeds, self.devices), np.broadcast_to(codes, self.seeds.shape))
        ids, first, counts = numbering
        if ids.shape != self.seeds.shape:
            raise ValueError(f"stream ids of shape {ids.shape} do not fit {cells}")
        self.stream_ids: np.ndarray = ids
        """The stream id of every (rank, generator) cell, numbered by first appearance (rank-major)."""
        self.stream_first: np.ndarray = first
        """For each stream id, the flat (rank-major) index of the first cell that has it."""
        self.stream_counts: np.ndarray = counts
        """For each stream id, how many cells have it."""

    # ------------------------------------------------------------------ identity
    @property
    def draws(self) -> int:
        """How many values were drawn from each generator."""
        return self.values.shape[2]

    @property
    def num_streams(self) -> int:
        """How many distinct streams the world holds."""
        return int(self.stream_first.size)

    def generator_index(self, generator: str) -> int:
        """The column of ``generator`` (one of ``GENERATORS``); ``ValueError`` naming the choices otherwise."""
        try:
            return self.generators.index(generator)
        except ValueError:
            raise ValueError(f"generator={generator!r} is not one of {', '.join(self.generators)}") from None


Row = dict[str, Any]

_INIT_GENERATORS = ("default_cpu", "pp_init", "tp_init")
_STEP_GENERATORS = ("pp", "tp")


def _row(check: str, ok: bool, detail: str) -> Row:
    return {"check": check, "ok": bool(ok), "detail": detail}


def _cell(report: StreamCells, rank: int, generator: str) -> str:
    index = report.generator_index(generator)
    return f"seed {int(report.seeds[rank, index])} on {report.devices[index]}"


def _seeds_text(first: int, second: int, device: str) -> str:
    """Two seeds that give one stream on ``device``: one seed, or two equal in the bits the CPU generator reads."""
    if first == second:
        return f"seed {first} on {device}"
    return (
        f"seeds {first} and {second} on {device}, equal in their low 32 bits, the only bits torch's CPU generator uses"
    )


def _same_stream(report: StreamCells, a: tuple[int, str], b: tuple[int, str]) -> str:
    """How two cells that share one stream are seeded."""
    (ra, ga), (rb, gb) = a, b
    sa = int(report.seeds[ra, report.generator_index(ga)])
    sb = int(report.seeds[rb, report.generator_index(gb)])
    return _seeds_text(sa, sb, report.devices[report.generator_index(ga)])


def _rank_generator(report: StreamCells, flat: int) -> tuple[int, str]:
    """The (rank, generator name) of a flat cell index into the rank x generator table."""
    rank, column = divmod(int(flat), len(report.generators))
    return rank, report.generators[column]


def _duplicate_in_rows(ids: np.ndarray) -> tuple[int, int, int] | None:
    """The first (row, column, column) whose ids are equal inside one row, or ``None``."""
    if ids.shape[1] < 2:
        return None
    order = np.argsort(ids, axis=1, kind="stable")
    ordered = np.take_along_axis(ids, order, axis=1)
    same = ordered[:, 1:] == ordered[:, :-1]
    rows = np.flatnonzero(same.any(axis=1))
    if rows.size == 0:
        return None
    row = int(rows[0])
    col = int(np.flatnonzero(same[row])[0])
    a, b = sorted((int(order[row, col]), int(order[row, col + 1])))
    return row, a, b


def _distinct_within(report: StreamCells, generators: tuple[str, ...], dim: str, what: str) -> str | None:
    """Failure text when some ``generators`` stream is shared by two ranks of one group of ``dim``."""
    groups = report.layout.groups(dim)
    for generator in generators:
        ids = report.stream_ids[:, report.generator_index(generator)][groups]
        found = _duplicate_in_rows(ids)
        if found is not None:
            row, a, b = found
            ra, rb = int(groups[row, a]), int(groups[row, b])
            return (
                f"{generator} streams shared {what} {dim} group {members_text(groups[row])}: "
                f"ranks {ra} and {rb} both have {_same_stream(report, (ra, generator), (rb, generator))}"
            )
    return None


def check_pp_shared_in_tensor_groups(report: StreamCells) -> Row:
    """pp streams are shared by every rank of a tensor group and by no rank outside it."""
    name = "pp streams shared exactly within each tensor group"
    groups = report.layout.groups("tensor")
    ids = report.stream_ids[:, report.generator_index("pp")][groups]
    differ = np.flatnonzero((ids != ids[:, :1]).any(axis=1))
    if differ.size:
        row = int(differ[0])
        col = int(np.flatnonzero(ids[row] != ids[row, 0])[0])
        ra, rb = int(groups[row, 0]), int(groups[row, col])
        return _row(
            name,
            False,
            f"pp streams differ inside tensor group {members_text(groups[row])}: "
            f"rank {ra} has {_cell(report, ra, 'pp')}, rank {rb} has {_cell(report, rb, 'pp')}",
        )
    found = _duplicate_in_rows(ids[:, :1].T)
    if found is not None:
        _, a, b = found
        ra, rb = int(groups[a, 0]), int(groups[b, 0])
        return _row(
            name,
            False,
            f"tensor groups {members_text(groups[a])} and {members_text(groups[b])} share one pp stream "
            f"({_same_stream(report, (ra, 'pp'), (rb, 'pp'))})",
        )
    return _row(
        name,
        True,
        f"each of the {groups.shape[0]} tensor groups has its own pp stream, shared by its {groups.shape[1]} rank(s)",
    )


def check_tp_distinct_in_tensor_groups(report: StreamCells) -> Row:
    """tp streams (and tp_init streams, unless ``reproducible_init``) differ between the ranks of a tensor group."""
    name = "tp streams distinct inside every tensor group"
    tp = report.layout.tensor_parallel
    if tp == 1:
        return _row(name, True, "tensor_parallel=1: every tensor group has a single rank")
    generators = ("tp",) if report.layout.reproducible_init else ("tp", "tp_init")
    failure = _distinct_within(report, generators, "tensor", "inside")
    if failure is not None:
        return _row(name, False, failure)
    return _row(name, True, f"the {tp} ranks of every tensor group draw different {' and '.join(generators)} streams")


def check_distinct_across(report: StreamCells, dim: str) -> Row:
    """pp and tp streams differ between the ranks of every ``dim`` group (``data`` or ``pipeline``)."""
    name = f"pp and tp streams distinct across {dim} ranks"
    size = report.layout.groups(dim).shape[1]
    if size == 1:
        return _row(name, True, f"{dim} parallelism is 1: nothing to compare")
    failure = _distinct_within(report, _STEP_GENERATORS, dim, f"across {dim} ranks in")
    if failure is not None:
        return _row(name, False, failure)
    return _row(name, True, f"in every {dim} group the {size} ranks draw different pp and tp streams")


def check_init_generators(report: StreamCells) -> Row:
    """Init generators equal across data and pipeline ranks exactly when ``reproducible_init``."""
    name = "init generators equal across data and pipeline ranks exactly when reproducible_init"
    layout = report.layout
    if layout.reproducible_init:
        # The ranks of tensor rank t are t, t + tp, t + 2 tp, ...: rank t is the first of its class.
        tensor_rank = layout.ranks["tensor_rank"].to_numpy()
        for generator in _INIT_GENERATORS:
            ids = report.stream_ids[:, report.generator_index(generator)]
            bad = np.flatnonzero(ids != ids[tensor_rank])
            if bad.size:
                other = int(bad[0])
                first = int(tensor_rank[other])
                return _row(
                    name,
                    False,
                    f"reproducible_init=True but {generator} differs across data/pipeline ranks: rank {first} has "
                    f"{_cell(report, first, generator)}, rank {other} has {_cell(report, other, generator)}",
                )
        return _row(
            name,
            True,
            "reproducible_init=True: default_cpu, pp_init and tp_init are shared across data and pipeline ranks; "
            "tp_init is also one stream on every rank (the seed ignores tensor_rank then)",
        )
    for dim in ("data", "pipeline"):
        if layout.groups(dim).shape[1] > 1:
            failure = _distinct_within(report, _INIT_GENERATORS, dim, f"across {dim} ranks in")
            if failure is not None:
                return _row(name, False, f"reproducible_init=False but {failure}")
    return _row(name, True, "reproducible_init=False: every init stream differs across data and pipeline ranks")


def _other_moments(report: StreamCells) -> list[tuple[str, int, PhaseType]]:
    moments = [(f"step {report.step + 1}", report.step + 1, report.phase)]
    test_like = {PhaseType.test, PhaseType.inference}
    for phase in (PhaseType.training, PhaseType.validation, PhaseType.test):
        if phase is report.phase or (phase in test_like and report.phase in test_like):
            continue
        moments.append((f"phase {phase.name}", report.step, phase))
    return moments


def check_streams_change(report: StreamCells) -> Row:
    """Every rank's pp and tp streams change at the next step and in every other phase, and never reappear."""
    name = "streams change with step and with phase"
    columns = [report.generator_index(g) for g in _STEP_GENERATORS]
    device = report.devices[columns[0]]
    current = report.seeds[:, columns]
    current_keys = stream_key(current, device)
    here = f"step {report.step} {report.phase.name}"
    for label, step, phase in _other_moments(report):
        table = report.layout.seed_table(step, phase)
        other = table[list(_STEP_GENERATORS)].to_numpy(dtype=np.uint64)
        other_keys = stream_key(other, device)
        same = np.argwhere(current_keys == other_keys)
        if same.size:
            rank, col = (int(v) for v in same[0])
            generator = _STEP_GENERATORS[col]
            return _row(
                name,
                False,
                f"rank {rank}'s {generator} stream is the same at {here} and at {label} "
                f"({_seeds_text(int(current[rank, col]), int(other[rank, col]), device)})",
            )
        _, i, j = np.intersect1d(current_keys.ravel(), other_keys.ravel(), return_indices=True)
        if i.size:
            k = int(np.argmin(j))  # the lowest rank whose stream at the other moment is taken
            (ra, ga), (rb, gb) = divmod(int(i[k]), 2), divmod(int(j[k]), 2)
            return _row(
                name,
                False,
                f"rank {rb}'s {_STEP_GENERATORS[gb]} stream at {label} is rank {ra}'s {_STEP_GENERATORS[ga]} stream "
                f"at {here} ({_seeds_text(int(other[rb, gb]), int(current[ra, ga]), device)})",
            )
    labels = ", ".join(label for label, _, _ in _other_moments(report))
    return _row(
        name, True, f"at {labels} every rank's pp and tp streams are new, and none is another rank's stream at {here}"
    )


def _expected_classes(report: StreamCells) -> np.ndarray:
    """For every cell, the class of cells that are meant to share its stream (same class = may share)."""
    layout = report.layout
    world = layout.world_size
    ranks = np.arange(world, dtype=np.int64)
    coords = layout.ranks
    model = coords["data_rank"].to_numpy() * layout.pipeline_parallel + coords["pipeline_rank"].to_numpy()
    everyone = np.zeros(world, dtype=np.int64)
    reproducible = layout.reproducible_init
    per_generator = {
        "default_cpu": (0, everyone if reproducible else model),
        "pp_init": (0, everyone if reproducible else model),
        "tp_init": (1, everyone if reproducible else ranks),
        "pp": (2, model),
        "tp": (3, ranks),
    }
    classes = np.empty(report.seeds.shape, dtype=np.int64)
    for index, generator in enumerate(report.generators):
        kind, within = per_generator[generator]
        classes[:, index] = kind * world + within
    return classes


def check_no_collisions(report: StreamCells) -> Row:
    """No two cells that are meant to have different streams share one, across all ranks and generators."""
    name = "no two streams that should differ collide anywhere in the world"
    ids = report.stream_ids.ravel()
    classes = _expected_classes(report).ravel()
    width = int(classes.max()) + 1
    pairs = np.unique(ids * width + classes)
    per_stream = np.bincount(pairs // width, minlength=report.num_streams)
    colliding = np.flatnonzero(per_stream > 1)
    if colliding.size:
        stream = int(colliding[0])
        cells = np.flatnonzero(ids == stream)
        a = int(cells[0])
        b = int(cells[np.flatnonzero(classes[cells] != classes[a])[0]])
        (ra, ga), (rb, gb) = _rank_generator(report, a), _rank_generator(report, b)
        return _row(
            name,
            False,
            f"{colliding.size} stream(s) shared by cells meant to differ; first: rank {ra}'s "
            f"{ga} and rank {rb}'s {gb} ({_same_stream(report, (ra, ga), (rb, gb))})",
        )
    return _row(name, True, f"{report.num_streams} distinct streams; every shared one is shared by design")


def _equal_rows(rows: np.ndarray) -> tuple[int, int] | None:
    """Indices of two equal rows, or ``None`` when all rows differ.

    Sorts on the first column only, then compares whole rows among those sharing a first value (rare for
    random draws), sorted on every column.
    """
    order = np.argsort(rows[:, 0], kind="stable")
    firsts = rows[order, 0]
    equal = firsts[1:] == firsts[:-1]
    if not equal.any():
        return None
    candidate = np.zeros(order.size, dtype=bool)
    candidate[1:] |= equal
    candidate[:-1] |= equal
    subset = order[candidate]
    subset = subset[np.lexsort(rows[subset].T[::-1])]
    same = (rows[subset][1:] == rows[subset][:-1]).all(axis=1)
    if not same.any():
        return None
    k = int(np.argmax(same))
    a, b = int(subset[k]), int(subset[k + 1])
    return min(a, b), max(a, b)


def check_draws_agree(report: StreamCells) -> Row:
    """Cells with one stream id drew the same values; cells with different ids drew different values."""
    name = "draws agree with stream ids"
    values = report.values.reshape(-1, report.draws)
    ids, first = report.stream_ids.ravel(), report.stream_first
    bad = np.flatnonzero((values != values[first[ids]]).any(axis=1))
    if bad.size:
        b = int(bad[0])
        a = int(first[ids[b]])
        (ra, ga), (rb, gb) = _rank_generator(report, a), _rank_generator(report, b)
        return _row(
            name,
            False,
            f"rank {ra}'s {ga} and rank {rb}'s {gb} have {_same_stream(report, (ra, ga), (rb, gb))} "
            "but drew different values",
        )
    found = _equal_rows(values[first])
    if found is not None:
        a, b = found
        (ra, ga), (rb, gb) = _rank_generator(report, first[a]), _rank_generator(report, first[b])
        return _row(
            name,
            False,
            f"rank {ra}'s {ga} ({_cell(report, ra, ga)}) and rank {rb}'s {gb} ({_cell(report, rb, gb)}) "
            "drew the same values",
        )
    return _row(
        name,
        True,
        f"{plural(first.size, 'stream')}, each with its own {plural(report.draws, 'draw')}, equal wherever shared",
    )


def note_inference_reuses_test(report: StreamCells) -> Row:
    """A note (always ok): the inference phase reuses the test phase's seed shift, hence its streams."""
    layout = report.layout
    test = layout.seed_table(report.step, PhaseType.test).iloc[0]
    inference = layout.seed_table(report.step, PhaseType.inference).iloc[0]
    same = int(test["pp"]) == int(inference["pp"]) and int(test["tp"]) == int(inference["tp"])
    detail = (
        "the seed reuses test_seed_shift for the inference phase, so at any step inference draws exactly the test "
        f"phase's pp and tp streams (rank 0 at step {report.step}: pp seed {int(inference['pp'])} in both"
        f"{'' if same else ' -- NOT equal here'}); use a different step if they must differ"
    )
    return _row("note: inference reuses the test phase's streams", True, detail)


def note_cpu_seed_bits(report: StreamCells) -> Row:
    """A note (always ok): torch's CPU generator reads only the low 32 bits of a seed; says what that merges here."""
    cpu = [i for i, device in enumerate(report.devices) if device == "cpu"]
    seeds = report.seeds[:, cpu]
    ordered = np.sort(seeds, axis=None)
    distinct_seeds = int(np.count_nonzero(ordered[1:] != ordered[:-1])) + 1 if ordered.size else 0
    distinct_streams = int(np.count_nonzero(np.bincount(report.stream_ids[:, cpu].ravel())))
    names = ", ".join(report.generators[i] for i in cpu)
    merged = (
        "no two of them merge"
        if distinct_seeds == distinct_streams
        else f"they make only {distinct_streams} distinct CPU streams"
    )
    return _row(
        "note: torch's CPU generator uses only the low 32 bits of a seed",
        True,
        f"manual_seed(s) and manual_seed(s + 2**32) give the same numbers on the CPU (not on CUDA), so CPU streams "
        f"are identified by seed % 2**32; the CPU generators here ({names}) hold {distinct_seeds} distinct seeds "
        f"and {merged}",
    )


CHECKS = (
    check_pp_shared_in_tensor_groups,
    check_tp_distinct_in_tensor_groups,
    lambda report: check_distinct_across(report, "data"),
    lambda report: check_distinct_across(report, "pipeline"),
    check_init_generators,
    check_streams_change,
    check_no_collisions,
    check_draws_agree,
    note_inference_reuses_test,
    note_cpu_seed_bits,
)
"""Every check, in the order of the table."""


def run_checks(report: StreamCells) -> list[Row]:
    """Every check's row for ``report``."""
    return [check(report) for check in CHECKS]
