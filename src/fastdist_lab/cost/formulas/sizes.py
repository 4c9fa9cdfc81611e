"""The numbers of one (layout, model, training) the memory and communication formulas read."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from ...errors import CostError
from ...setup import Training, Transformer, check_schedule
from .setup_columns import Setups, chunk_layers, layout_expert_sizes

ACTIVATION_BYTES = 2
"""Bytes per activation value: bf16, as in Korthikanti et al. 2022 (Section 4.1) and Megatron-LM's estimator."""


@dataclass(frozen=True)
class Sizes:
    """Parallel sizes and per-rank token counts of one step.

    ``tokens`` is the sequence length one rank holds (``seq_length / sequence_data_parallel``);
    ``sequence_parallel`` is sequence tensor parallel as it takes effect (on, and ``tensor_parallel > 1``).
    """

    tensor_parallel: int
    pipeline_parallel: int
    data_parallel: int
    sequence_data_parallel: int
    sequence_parallel: bool
    microbatches: int
    tokens: int
    local_world_size: int

    @classmethod
    def of(cls, layout: Any, model: Transformer, training: Training) -> Sizes:
        """Read the sizes off ``layout`` (a ``Layout``), checking that ``model`` splits over it."""
        try:
            tp, pp = int(layout.tensor_parallel), int(layout.pipeline_parallel)
            dp, sdp = int(layout.data_parallel), int(layout.sequence_data_parallel)
            local = int(layout.local_world_size)
            layout_stp = bool(layout.sequence_tensor_parallel)
        except AttributeError:
            raise CostError(f"layout={layout!r} must be a fastdist_lab.Layout") from None
        sequence_parallel = (training.sequence_tensor_parallel or layout_stp) and tp > 1
        ep, etp = layout_expert_sizes(layout)
        model.check_split(tp, pp, sdp * (tp if sequence_parallel else 1), ep, etp)
        v = training.virtual_pipeline_stages
        check_schedule(training.schedule_spec, pp, training.microbatches(pp), v)
        training.engine_spec.check(training.schedule, pp, training.zero_stage)
        chunk_layers(model.num_layers, pp, v, training.layers_per_stage)
        return cls(
            tensor_parallel=tp,
            pipeline_parallel=pp,
            data_parallel=dp,
            sequence_data_parallel=sdp,
            sequence_parallel=sequence_parallel,
            microbatches=training.microbatches(pp),
            tokens=model.seq_length // sdp,
            local_world_size=local,
        )

    def layers_per_stage(self, num_layers: int) -> np.ndarray:
        """Layers of each pipeline stage under the default split (``Training.layers_per_stage`` unset, one stage
        per rank): an even split, the first ``num_layers % pp`` stages one more."""
        pp = self.pipeline_parallel
        return num_layers // pp + (np.arange(pp) < num_layers % pp).astype(np.int64)


def one_setup(layout: Any, model: Transformer, training: Training) -> tuple[Sizes, Setups]:
    """The ``Sizes`` of ``training`` on ``layout`` (checking that ``model`` splits over it) and its one-row
    ``Setups``: what ``estimate`` reports on and what the validation prices a published run with."""
    sizes = Sizes.of(layout, model, training)
    return sizes, Setups.single(layout, model, training, sizes.sequence_parallel)
