"""Which ranks share a random (dropout) stream, under this project's rules, Megatron's and torchtitan's.

Two ranks share a stream when their generators get the same seed. The frameworks' rules, as seeds:

* this project (``Layout.seed_table``): the ``pp`` generator (dropout outside tensor-parallel regions) is shared
  by the ranks of a tensor group and differs across data and pipeline ranks; the ``tp`` generator
  (dropout inside tensor-parallel regions) differs on every rank.
* Megatron (``megatron/training/initialize.py::_set_random_seed`` and
  ``megatron/core/tensor_parallel/random.py::model_parallel_cuda_manual_seed``): base = seed + 100 * pp_rank
  (+ 10 * dp_rank with ``data_parallel_random_init``, dp without cp); torch's default CUDA generator
  ("data-parallel-rng") gets base, the ``model-parallel-rng`` tracker state gets base + 2718 + tp_rank. So dropout
  outside tensor-parallel regions is shared by all tensor, context and data ranks of a stage, and dropout inside
  them differs across tensor ranks only.
* torchtitan (``torchtitan/distributed/utils.py::set_determinism`` with ``distinct_seed_mesh_dims=["pp"]``): one
  seed, seed + pp_rank, for every rank of a pipeline stage (different values inside a tensor-parallel region come
  from DTensor's offset-based RNG tracker, not from different seeds).

With experts (``expert_seed_streams``, ``expert_sharing_table``; docs/formulas.md, "Expert streams"): Fast-LLM
(91b28fab) has no experts and this project adds no generator: an expert layer draws from the rank's ``tp`` generator,
which differs on every rank. Megatron-Core seeds a third tracker state, ``expert-parallel-rng``, with base + 1024 +
100 * ep_rank + etp_rank (``model_parallel_cuda_manual_seed``; base as above), shared by the ranks of an expert-data
group.

Here every framework is laid on this project's layout through the equivalences (tp = tensor, cp = sequence-data,
dp = batch-data, pp = pipeline), so the same physical rank is compared. Pure numpy/pandas.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from ..config import MAX_SEED
from ..errors import ConventionError
from ..experts import EXPERT_AXES
from ..seeds import DEVICE_TYPES, stream_ids

if TYPE_CHECKING:
    import pandas as pd

AXES: tuple[str, ...] = ("tensor", "sequence_data", "batch_data", "pipeline")
"""The layout axes the sharing table reports on."""

STREAMS: dict[str, str] = {
    "fastdist pp": "this project's pp generator (shared in a tensor group)",
    "fastdist tp": "this project's tp generator (tensor-parallel regions)",
    "Megatron data-parallel-rng": "torch's default CUDA generator under Megatron",
    "Megatron model-parallel-rng": "Megatron's tensor-model-parallel tracker state",
    "torchtitan": "the one seed torchtitan gives a pipeline stage",
}
"""The streams compared, with what each one is."""

MEGATRON_TP_OFFSET = 2718
"""Megatron's tensor-model-parallel seed offset."""

MEGATRON_PP_OFFSET = 100
"""Megatron's per-pipeline-stage seed offset."""

MEGATRON_DP_OFFSET = 10
"""Megatron's per-data-rank offset with ``data_parallel_random_init``."""


def megatron_seeds(
    tensor_rank: np.ndarray,
    pipeline_rank: np.ndarray,
    data_rank: np.ndarray,
    seed: int,
    data_parallel_random_init: bool = False,
) -> dict[str, np.ndarray]:
    """Megatron's two dropout seeds for arrays of tp/pp/dp ranks: ``data-parallel-rng`` and ``model-parallel-rng``."""
    base = seed + MEGATRON_PP_OFFSET * pipeline_rank.astype(object)
    if data_parallel_random_init:
        base = base + MEGATRON_DP_OFFSET * data_rank.astype(object)
    return {
        "Megatron data-parallel-rng": base,
        "Megatron model-parallel-rng": base + MEGATRON_TP_OFFSET + tensor_rank.astype(object),
    }


MEGATRON_EXPERT_OFFSET = 1024
"""Megatron-Core's expert-parallel seed offset (``model_parallel_cuda_manual_seed``)."""

MEGATRON_EP_OFFSET = 100
"""Megatron-Core's per-expert-rank seed offset (the expert-tensor rank adds 1 per rank)."""


EXPERT_STREAMS: dict[str, str] = {
    "fastdist tp": "this project's rule: an expert layer draws from the rank's tp generator",
    "fastdist pp": "this project's pp generator, shared in a dense tensor group: not for experts (contrast)",
    "Megatron expert-parallel-rng": "Megatron-Core's expert tracker state: base + 1024 + 100 ep + etp",
}
"""The streams an expert layer could draw from, compared per rank (``expert_seed_streams``)."""


def megatron_expert_seeds(
    expert_rank: np.ndarray,
    expert_tensor_rank: np.ndarray,
    pipeline_rank: np.ndarray,
    data_rank: np.ndarray,
    seed: int,
    data_parallel_random_init: bool = False,
) -> np.ndarray:
    """Megatron-Core's ``expert-parallel-rng`` seed for arrays of ranks: ``base + 1024 + 100 * ep_rank + etp_rank``,
    ``base`` its ``data-parallel-rng`` seed (``megatron_seeds``). Read in NVIDIA/Megatron-LM d98e8a64,
    ``megatron/core/tensor_parallel/random.py::model_parallel_cuda_manual_seed`` (its ``seed`` argument being
    ``megatron/training/initialize.py::_set_random_seed``'s seed + 100 * pp_rank).

        >>> ranks = dict(expert_rank=np.array([0, 1]), expert_tensor_rank=np.array([1, 0]))
        >>> megatron_expert_seeds(**ranks, pipeline_rank=np.array([1, 0]), data_rank=np.array([0, 0]), seed=1234)
        array([2359, 2358], dtype=object)
    """
    base = megatron_seeds(expert_tensor_rank, pipeline_rank, data_rank, seed, data_parallel_random_init)
    expert = (
        MEGATRON_EXPERT_OFFSET + MEGATRON_EP_OFFSET * expert_rank.astype(object) + expert_tensor_rank.astype(object)
    )
    return base["Megatron data-parallel-rng"] + expert


def expert_seed_streams(
    layout: Any,
    seed: int | None = None,
    step: int = 0,
    phase: str = "training",
    data_parallel_random_init: bool = False,
) -> pd.DataFrame:
    """One row per global rank of a ``layout`` with experts: its expert coordinates (``EXPERT_AXES``) and the seed
    of each stream of ``EXPERT_STREAMS``, this project's after ``set_step(step, phase)`` (``seed`` defaults to the
    layout's)."""
    import pandas as pd

    if not layout.has_experts:
        raise ConventionError("the layout has no experts: give expert_parallel > 1 or another expert_tensor_parallel")
    if seed is not None:
        layout = type(layout)(**{**layout.fields(), "seed": seed})
    grid = layout.expert_grid
    coordinates = {axis: grid.coordinate(axis) for axis in EXPERT_AXES}
    ours = layout.seed_table(step=step, phase=phase)
    data = layout.ranks["batch_data_rank"].to_numpy()
    megatron = megatron_expert_seeds(
        coordinates["expert"],
        coordinates["expert_tensor"],
        coordinates["pipeline"],
        data,
        int(layout.seed),
        data_parallel_random_init,
    )
    frame = pd.DataFrame(
        {
            **coordinates,
            "fastdist tp": ours["tp"].to_numpy(),
            "fastdist pp": ours["pp"].to_numpy(),
            "Megatron expert-parallel-rng": megatron,
        }
    )
    frame.index.name = "rank"
    return frame


def expert_sharing_table(layout: Any, device: str = "cuda", **kwargs: Any) -> pd.DataFrame:
    """Per stream of ``EXPERT_STREAMS``: distinct streams and, along each expert group (``expert_tensor``,
    ``expert``, ``expert_data``) and the pipeline, whether the stream is ``shared``, ``differs`` on every member or
    only ``partly`` (``-`` for a size 1); stream identity is ``seeds.stream_ids`` on ``device``. ``kwargs`` go to
    ``expert_seed_streams``."""
    import pandas as pd

    _check_device(device)
    frame = expert_seed_streams(layout, **kwargs)
    rows = []
    for stream, meaning in EXPERT_STREAMS.items():
        ids = stream_ids(frame[stream], device)
        row: dict[str, Any] = {"stream": stream, "distinct": int(ids.max()) + 1}
        row.update({axis: _along(ids, layout.groups(axis)) for axis in EXPERT_AXES})
        row["what"] = meaning
        rows.append(row)
    return pd.DataFrame(rows).set_index("stream")


def torchtitan_seeds(pipeline_rank: np.ndarray, seed: int) -> np.ndarray:
    """torchtitan's seed per rank with ``distinct_seed_mesh_dims=["pp"]``: (seed + pp_rank) mod 2**64."""
    return (seed + pipeline_rank.astype(object)) % MAX_SEED


def seed_streams(
    layout: Any,
    seed: int | None = None,
    step: int = 0,
    phase: str = "training",
    data_parallel_random_init: bool = False,
) -> pd.DataFrame:
    """One row per global rank of ``layout``: its four coordinates and the seed of each stream in ``STREAMS``.

    ``seed`` defaults to the layout's seed; this project's seeds are those after ``set_step(step, phase)``.
    """
    import pandas as pd

    if seed is not None:
        layout = type(layout)(**{**layout.fields(), "seed": seed})
    seed = int(layout.seed)
    ranks = layout.ranks
    tensor = ranks["tensor_rank"].to_numpy()
    pipeline = ranks["pipeline_rank"].to_numpy()
    batch = ranks["batch_data_rank"].to_numpy()
    ours = layout.seed_table(step=step, phase=phase)
    frame = pd.DataFrame(
        {
            "tensor": tensor,
            "sequence_data": ranks["sequence_data_rank"].to_numpy(),
            "batch_data": batch,
            "pipeline": pipeline,
            "fastdist pp": ours["pp"].to_numpy(),
            "fastdist tp": ours["tp"].to_numpy(),
            **megatron_seeds(tensor, pipeline, batch, seed, data_parallel_random_init),
            "torchtitan": torchtitan_seeds(pipeline, seed),
        }
    )
    frame.index.name = "rank"
    return frame


def stream_groups(layout: Any, stream: str, device: str = "cuda", **kwargs: Any) -> list[tuple[int, ...]]:
    """The sets of ranks sharing one stream of ``stream`` (a key of ``STREAMS``) on ``device``, ordered by first
    rank; ``kwargs`` go to ``seed_streams``."""
    if stream not in STREAMS:
        raise ConventionError(f"stream={stream!r}; use one of {', '.join(STREAMS)}")
    _check_device(device)
    ids = stream_ids(seed_streams(layout, **kwargs)[stream], device)
    return [tuple(int(r) for r in np.nonzero(ids == i)[0]) for i in range(int(ids.max()) + 1)]


def _check_device(device: str) -> None:
    if device not in DEVICE_TYPES:
        raise ConventionError(f"device={device!r}; use one of {', '.join(DEVICE_TYPES)}")


def _along(ids: np.ndarray, groups: np.ndarray) -> str:
    if groups.shape[1] == 1:
        return "-"
    values = ids[groups]
    if (values == values[:, :1]).all():
        return "shared"
    ordered = np.sort(values, axis=1)
    if (ordered[:, 1:] != ordered[:, :-1]).all():
        return "differs"
    return "partly"


def sharing_table(
    layout: Any,
    seed: int | None = None,
    step: int = 0,
    phase: str = "training",
    data_parallel_random_init: bool = False,
    device: str = "cuda",
) -> pd.DataFrame:
    """Per stream: how many distinct streams, ranks per stream, and along each layout axis whether the stream is
    ``shared`` by the whole group, ``differs`` on every member, or ``partly`` (``-`` for an axis of size 1).

    ``device`` says how seeds pick streams (see ``fastdist_lab.seeds.stream_key``): the dropout generators of all
    three frameworks are CUDA generators in training, the default."""
    import pandas as pd

    _check_device(device)
    frame = seed_streams(layout, seed, step, phase, data_parallel_random_init)
    rows = []
    for stream, meaning in STREAMS.items():
        ids = stream_ids(frame[stream], device)
        counts = np.bincount(ids)
        spread = str(int(counts[0])) if (counts == counts[0]).all() else f"{counts.min()}..{counts.max()}"
        row: dict[str, Any] = {"stream": stream, "distinct": int(counts.size), "ranks_per_stream": spread}
        row.update({axis: _along(ids, layout.groups(axis)) for axis in AXES})
        row["what"] = meaning
        rows.append(row)
    return pd.DataFrame(rows).set_index("stream")
