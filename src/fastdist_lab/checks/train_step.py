"""Does the layout train the same model? One real training step on the layout's groups against one process.

``check_training(cluster, layout, training=Training(...))`` runs one step of a ``TinyGPT`` on every rank of a running
cluster (processes or a simulated world of threads) and the same step in this process from the same initial weights
and data, then compares every rank's shards (``TrainingCheck``): README.md, "Does the layout train the same model?".
Fast-LLM tests its engine the same way: about forty distributed configurations against one GPU, every tensor within
a tolerance (``tests/utils/distributed_configs.py``, commit 91b28fab). With dropout the two sides draw different
masks, so the check judges the seed design on the real tensors instead (``dropout_check``).
"""

from __future__ import annotations

import math
import time
import warnings
from dataclasses import dataclass, field
from typing import Any

import pandas as pd
import torch

from ..errors import ClusterError, CostError, LayoutError
from ..layout import Layout
from ..runtime.supervisor import preload_in_workers
from ..setup import SCHEDULE_KINDS, Training, check_schedule
from .dropout_check import dropout_rows, mask_ids
from .pipeline_carrier import require_pipelining
from .tiny_gpt import TinyGPT, reference_step
from .train_compare import (
    RANK_COLUMNS,
    RELATIVE_TOLERANCE,
    group_problems,
    parameter_table,
    rank_rows,
    rank_worst,
    reduction_problems,
    shard_problems,
    zero_problems,
)
from .train_rank import TrainingFault, TrainingPlan, rank_groups, train_rank

# A training step runs torch's pipeline schedules on every rank: worker servers import them once, before forking.
preload_in_workers("torch.distributed.pipelining")

SUMMARY_ROWS = 5
"""How many of the worst parameter rows a summary shows."""
SUMMARY_PROBLEMS = 8
"""How many problems a summary spells out (the most telling come first)."""


@dataclass
class TrainingCheck:
    """What ``check_training`` found.

    ``loss`` (the layout's, summed over the last stage's data ranks) and ``reference_loss`` (one process; ``None``
    with dropout); ``table``: one row per parameter tensor (largest gradient and weight errors over every rank's
    shard, relative and absolute, the worst rank, the tolerance, ``ok``), ``None`` with dropout; ``tensors``: one
    row per (rank, parameter tensor); ``dropout``: the judgments of a step with dropout (else ``None``) and
    ``mask_sharing``, per rank the id of the first mask it drew from ``pp`` (equal ids: the same mask);
    ``problems``: what does not add up, in words, most telling first. When a rank's groups are not the layout's,
    no step runs (its peers would wait for it in collectives): the problems name the groups. ``seconds``: the
    time of each phase; ``training``: the ``cost.Training`` that ran.
    """

    layout: Layout
    mode: str
    schedule: str
    settings: dict[str, Any]
    loss: float | None
    reference_loss: float | None
    table: pd.DataFrame | None
    tensors: pd.DataFrame
    dropout: pd.DataFrame | None
    problems: list[str]
    tolerance: float = RELATIVE_TOLERANCE
    mask_sharing: Any = None
    seconds: dict[str, float] = field(default_factory=dict)
    training: Training | None = None

    @property
    def ok(self) -> bool:
        """Whether every check passed (every tensor within tolerance, or every dropout judgment)."""
        return not self.problems

    @property
    def rank_errors(self) -> pd.Series:
        """Each rank's worst relative error over its tensors (``inf``: it started from a wrong shard; NaN: not
        compared, as with dropout)."""
        if self.table is None:
            return pd.Series(float("nan"), index=pd.RangeIndex(self.layout.world_size, name="rank"), name="worst_rel")
        return rank_worst(self.tensors, self.layout.world_size)

    def rank_tensors(self, rank: int) -> pd.DataFrame:
        """The tensors ``rank`` holds, with their errors (one row each)."""
        return self.tensors[self.tensors["rank"] == rank].drop(columns="rank").reset_index(drop=True)

    def summary(self, rows: int = SUMMARY_ROWS) -> str:
        """The verdict, the losses, the ``rows`` worst parameter rows and how many there are (or the dropout
        judgments), and every problem: what ``fastdist-lab train-step`` prints."""
        lines = [
            f"layout: {self.layout!r}",
            f"ranks: {self.mode}; schedule: {self.schedule}; "
            + "; ".join(f"{k}={v}" for k, v in self.settings.items()),
        ]
        if self.reference_loss is not None and self.loss is not None:
            error = abs(self.loss - self.reference_loss) / max(abs(self.reference_loss), 1e-30)
            lines.append(
                f"loss: {self.loss:.7f} (layout) vs {self.reference_loss:.7f} (one process), relative error {error:.1e}"
            )
        elif self.loss is not None:
            lines.append(f"loss: {self.loss:.7f} (layout, dropout on: no one-process reference)")
        if self.table is not None:
            worst = self.table.assign(worst=self.table[["grad_rel", "weight_rel"]].max(axis=1))
            worst = worst.sort_values("worst", ascending=False).head(rows)
            bad = int((~self.table["ok"]).sum())
            lines.append(
                f"{len(self.table)} parameter tensors compared on {len(self.tensors)} shards, "
                f"tolerance {self.tolerance:g} relative: {len(self.table) - bad} ok, {bad} outside"
            )
            lines.append(f"worst {len(worst)}:")
            lines.append(_format_table(worst))
        if self.dropout is not None:
            lines.append(self.dropout[["check", "scope", "compared", "failed", "ok"]].to_string(index=False))
        lines += [f"problem: {problem}" for problem in self.problems[:SUMMARY_PROBLEMS]]
        if len(self.problems) > SUMMARY_PROBLEMS:
            lines.append(f"... and {len(self.problems) - SUMMARY_PROBLEMS} more problem(s) (TrainingCheck.problems)")
        lines.append("result: OK" if self.ok else "result: FAILED")
        return "\n".join(lines)

    def __repr__(self) -> str:
        return self.summary()


def _format_table(frame: pd.DataFrame) -> str:
    shown = frame[["name", "shape", "split", "ranks", "grad_rel", "weight_rel", "worst_rank", "ok", "note"]].copy()
    for column in ("grad_rel", "weight_rel"):
        shown[column] = shown[column].map(lambda v: "-" if math.isnan(v) else f"{v:.1e}")
    return shown.to_string(index=False)


def _applied(cluster: Any, layout: Layout, timeout: float | None) -> Layout:
    """``layout`` applied on ``cluster`` (not re-applied when it already is); the layout as the cluster runs it."""
    current = getattr(cluster, "layout", None)
    if isinstance(current, Layout) and current == layout.replace(backend=current.backend):
        return current
    verification = cluster.apply(layout, timeout=timeout)
    if not verification.ok:
        raise ClusterError(f"the layout's groups failed their check, so no training step ran:\n{verification}")
    return getattr(cluster, "layout", None) or layout


DEPRECATED_KEYWORDS: dict[str, str] = {
    "schedule": "schedule",
    "micro_batches": "num_microbatches",
    "micro_batch_size": "micro_batch_size",
    "virtual_stages": "virtual_pipeline_stages",
    "zero_stage": "zero_stage",
}
"""``check_training``'s keywords before ``training=`` (deprecated for one release) and the ``Training`` field each
became."""


def _old_keywords(layout: Layout, old: dict[str, Any]) -> Training:
    """The ``Training`` that ``check_training``'s deprecated keywords ask for, with their old defaults (twice the
    pipeline's micro-batches, two virtual stages for a multi-stage schedule, ZeRO 1), each keyword warned about."""
    unknown = sorted(set(old) - set(DEPRECATED_KEYWORDS))
    if unknown:
        raise TypeError(f"check_training() got an unexpected keyword argument {unknown[0]!r}")
    for name in old:
        warnings.warn(
            f"fastdist_lab.checks.check_training({name}=...) is deprecated: use training=Training("
            f"{DEPRECATED_KEYWORDS[name]}=...) (the old keyword goes in the next release)",
            DeprecationWarning,
            stacklevel=3,
        )
    schedule = old.get("schedule", "1f1b")
    if schedule not in SCHEDULE_KINDS:
        raise LayoutError(f"schedule={schedule!r} must be one of {', '.join(map(repr, SCHEDULE_KINDS))}")
    multi = SCHEDULE_KINDS[schedule].multi_stage
    micro_batches = old.get("micro_batches")
    try:
        return Training(
            schedule=schedule,
            num_microbatches=2 * layout.pipeline_parallel if micro_batches is None else micro_batches,
            micro_batch_size=old.get("micro_batch_size", 1),
            virtual_pipeline_stages=old.get("virtual_stages", 2) if multi else 1,
            zero_stage=old.get("zero_stage", 1),
        )
    except CostError as error:
        raise LayoutError(str(error)) from None


def training_settings(
    layout: Layout, training: Training | None = None, model: TinyGPT | None = None, dropout: float = 0.0
) -> tuple[TinyGPT, Layout, int]:
    """The model, the layout as the step runs it (sequence tensor parallel on when ``training`` asks for it) and
    the micro-batches per data rank of a training step of ``layout`` with ``training`` (default ``Training()``);
    ``LayoutError`` naming the first bad value, before anything runs."""
    training = Training() if training is None else training
    if not isinstance(training, Training):
        raise LayoutError(f"training={training!r} must be a fastdist_lab.cost.Training")
    if model is None:
        model = TinyGPT(num_experts=max(4, 2 * layout.expert_parallel)) if layout.has_experts else TinyGPT()
    if not isinstance(model, TinyGPT):
        raise LayoutError(f"model={model!r} must be a TinyGPT")
    if layout.has_experts or model.num_experts:
        model.check_experts(layout.expert_parallel, layout.expert_sizes["expert_tensor"])
        if training.zero_stage == 3:
            raise LayoutError("zero_stage=3 with experts: the step shards dense weights only; use zero_stage 0-2")
    if isinstance(dropout, bool) or not (isinstance(dropout, (int, float)) and 0.0 <= dropout < 1.0):
        raise LayoutError(f"dropout={dropout!r} must be a probability in [0, 1)")
    if dropout > 0.0 and training.recompute != "none":
        raise LayoutError(
            f"recompute={training.recompute!r} with dropout={dropout}: the recomputed forward would draw other "
            "dropout masks from the layout's generators; use dropout=0 or recompute='none'"
        )
    if training.layers_per_stage is not None:
        raise LayoutError(
            f"layers_per_stage={training.layers_per_stage!r}: the training step splits the model's layers evenly "
            "over the stages; use layers_per_stage=None"
        )
    if training.sequence_tensor_parallel and layout.tensor_parallel > 1 and not layout.sequence_tensor_parallel:
        layout = layout.replace(sequence_tensor_parallel=True)
    micro_batches = training.microbatches(layout.pipeline_parallel)
    stages = check_schedule(
        training.schedule_spec,
        layout.pipeline_parallel,
        micro_batches,
        training.virtual_pipeline_stages,
        run=True,
        error=LayoutError,
    )
    model.check_layout(
        layout.tensor_parallel, layout.sequence_data_parallel, bool(layout.sequence_tensor_parallel), stages
    )
    return model, layout, micro_batches


def model_for(layout: Layout, training: Training | None = None) -> TinyGPT:
    """The smallest ``TinyGPT`` (from the default one) that splits over ``layout`` with ``training``: a layer per
    pipeline stage at least, heads and vocabulary divisible by the tensor size, sequences divisible by the
    sequence-data (and, with sequence tensor parallel, the tensor) size: what the lab trains an Advisor row on.

    Example:
        >>> model_for(Layout(world_size=64, tensor_parallel=8, pipeline_parallel=4, sequence_data_parallel=2),
        ...           Training(schedule="interleaved-1f1b", virtual_pipeline_stages=2, sequence_tensor_parallel=True))
        TinyGPT(vocab_size=64, hidden_size=128, heads=8, layers=8, ffn_size=256, sequence_length=16)
    """
    training = Training() if training is None else training
    base, tp = TinyGPT(), layout.tensor_parallel
    stages = training.schedule_spec.stages(layout.pipeline_parallel, training.virtual_pipeline_stages)
    split = layout.sequence_data_parallel * (tp if training.sequence_tensor_parallel or
                                             layout.sequence_tensor_parallel else 1)  # fmt: skip
    heads = math.lcm(base.heads, tp)
    return TinyGPT(vocab_size=math.lcm(base.vocab_size, tp), hidden_size=max(base.hidden_size, 16 * heads),
                   heads=heads, layers=max(base.layers, stages), ffn_size=math.lcm(base.ffn_size, tp),
                   sequence_length=math.lcm(base.sequence_length, split))  # fmt: skip


def check_training(
    cluster: Any,
    layout: Layout,
    *,
    training: Training | None = None,
    model: TinyGPT | None = None,
    dropout: float = 0.0,
    learning_rate: float = 0.1,
    seed: int = 0,
    tolerance: float = RELATIVE_TOLERANCE,
    fault: TrainingFault | None = None,
    timeout: float | None = None,
    **deprecated: Any,
) -> TrainingCheck:
    """One training step of ``model`` (default ``TinyGPT()``) on every rank of ``cluster`` with ``layout`` applied
    (applied first when it is not), and the same step in this process; see ``TrainingCheck``.

    ``training``: the set-up (``fastdist_lab.cost.Training``, default ``Training()``; what ``estimate`` prices and
    an Advisor row gives): its ``schedule`` (any of ``cost.SCHEDULE_KINDS``, run by torch's class:
    ``ScheduleGPipe``, ``Schedule1F1B``, ``ScheduleInterleaved1F1B``, ``ScheduleLoopedBFS``,
    ``ScheduleInterleavedZeroBubble``) with ``virtual_pipeline_stages`` stages per rank, ``num_microbatches`` per
    data rank (``None``: the pipeline size) of ``micro_batch_size`` sequences, ``zero_stage`` 0-3 (0: gradients
    all-reduced; 1 and 2: reduce-scattered, each rank updating its slice, weights all-gathered; 3: also the
    weights sharded and all-gathered before use; ``train_rank``), ``recompute`` (``torch.utils.checkpoint``) and
    ``sequence_tensor_parallel`` (turned on in the layout). Kernels, overlap and bytes per value are the cost
    model's alone. On a layout with experts the model's MLPs are mixtures of experts (default ``TinyGPT(num_experts=
    max(4, 2 * EP))``) dispatched over the pool's expert groups (``checks.moe_layer``; ZeRO 3 refused). ``seed`` draws
    the initial weights and the tokens; ``fault`` breaks one thing on purpose
    (``TrainingFault``). The keywords ``schedule``, ``micro_batches``, ``micro_batch_size``, ``virtual_stages`` and
    ``zero_stage`` still work for one release (``DeprecationWarning`` naming the ``Training`` field, their old
    defaults). Bad arguments raise ``LayoutError`` naming the value; a rank that raises or hangs,
    ``ClusterError`` / ``ClusterTimeout``.
    """
    if deprecated:
        if training is not None:
            raise LayoutError(f"give training= or the deprecated keywords {sorted(deprecated)}, not both")
        training = _old_keywords(layout, deprecated)
    require_pipelining()
    if getattr(cluster, "mode", None) == "fake":
        raise ClusterError("fake process groups run no collective, so no training step: use threads or processes")
    training = Training() if training is None else training
    model, layout, micro_batches = training_settings(layout, training, model, dropout)
    begin = time.perf_counter()
    applied = _applied(cluster, layout, timeout)
    weights = model.initial_weights(seed)
    sequences = layout.batch_data_parallel * micro_batches * training.micro_batch_size
    generator = torch.Generator().manual_seed(seed + 1)
    tokens = torch.randint(model.vocab_size, (sequences, model.sequence_length + 1), generator=generator)
    plan = TrainingPlan(model, weights, tokens, training, float(dropout), learning_rate, fault or TrainingFault())
    settings = {"micro_batches": micro_batches, "micro_batch_size": training.micro_batch_size, "dropout": dropout}
    settings.update(zero_stage=training.zero_stage, recompute=training.recompute, seed=seed)
    settings["sequence_tensor_parallel"] = bool(layout.sequence_tensor_parallel)
    if training.schedule_spec.multi_stage:
        settings["virtual_stages"] = training.virtual_pipeline_stages
    check = TrainingCheck(applied, str(getattr(cluster, "mode", "processes")), training.schedule, settings, None,
                          None, None, _empty_tensors(), None, [], tolerance, training=training)  # fmt: skip
    started = time.perf_counter()
    groups = _ran(cluster.run(rank_groups, plan.fault, timeout=timeout))
    check.problems = group_problems(applied, [{"rank": rank, "groups": used} for rank, used in enumerate(groups)])
    if check.problems:  # ranks would wait in collectives their peers never join: name the groups, run no step
        check.problems.append("no training step ran: the ranks' groups are not the layout's")
        check.seconds = {"apply": started - begin, "groups": time.perf_counter() - started}
        return check
    values = sorted(_ran(cluster.run(train_rank, plan, timeout=timeout)), key=lambda value: value["rank"])
    ran = time.perf_counter()
    last = [v for v in values if v["loss"] is not None and applied.coordinates["tensor_rank"][v["rank"]] == 0]
    check.loss = float(sum(v["loss"] for v in last)) if last else None
    if dropout == 0.0:
        reference = reference_step(model, weights, tokens, learning_rate)
        reference["initial"] = weights
        _judge_reference(check, reference, values)
    else:
        check.dropout = dropout_rows(applied, values, float(dropout), str(getattr(cluster, "device_type", "cpu")))
        check.problems += [f"{row.check}: {row.detail}" for row in check.dropout.itertuples() if not row.ok]
        check.mask_sharing = mask_ids(values, applied.world_size)
    check.problems[:0] = misrouted_problems(values)  # the cause first
    check.seconds = {"apply": started - begin, "step": ran - started, "compare": time.perf_counter() - ran}
    return check


def _judge_reference(check: TrainingCheck, reference: dict[str, Any], values: list[dict[str, Any]]) -> None:
    """Fill ``check``'s tables and problems from every rank's shards against the one-process ``reference``."""
    tolerance, world = check.tolerance, check.layout.world_size
    check.reference_loss = reference["loss"]
    check.tensors = frame = rank_rows(reference, values)
    check.table = table = parameter_table(frame, reference, values, tolerance)
    problems = shard_problems(frame) + zero_problems(frame)
    loss, ref_loss = check.loss, check.reference_loss
    loss_differs = loss is None or abs(loss - ref_loss) > tolerance * max(abs(ref_loss), 1e-30)
    if not problems and not loss_differs:  # the cause first: a right forward with wrong gradients
        problems += reduction_problems(frame, tolerance)
    bad = [int(rank) for rank, value in rank_worst(frame, world).items() if not value <= tolerance]
    if bad and len(bad) < world:
        problems.append(f"ranks outside the tolerance: {bad}")
    if loss_differs:
        problems.append(f"the loss differs: {loss} on the layout, {ref_loss} in one process")
    for row in table[~table["ok"]].itertuples():
        worst = row.weight_rel if math.isnan(row.grad_rel) else max(row.grad_rel, row.weight_rel)
        note = f"; {row.note}" if row.note else ""
        problems.append(
            f"{row.name}: relative error {worst:.1e} > {tolerance:g} (worst on rank {row.worst_rank}){note}"
        )
    check.problems += problems


def misrouted_problems(values: list[dict[str, Any]]) -> list[str]:
    """Each rank that sent MoE rows to an expert rank not holding their expert, in words (from the receivers)."""
    sent: dict[int, list[tuple[str, int, int]]] = {}
    for value in values:
        for site, source, rows in value.get("misrouted", []):
            sent.setdefault(source, []).append((site, value["rank"], rows))
    problems = []
    for source, notes in sorted(sent.items()):
        receivers = sorted({receiver for _, receiver, _ in notes})
        layers = sorted({site.split(".")[1] for site, _, _ in notes}, key=int)
        problems.append(
            f"rank {source} sent {sum(rows for _, _, rows in notes)} MoE rows of layer(s) {', '.join(layers)} to "
            f"rank(s) {receivers}, which do not hold their experts: its dispatch goes to the wrong expert rank"
        )
    return problems


def _ran(results: Any) -> list[Any]:
    """Every rank's value, or ``ClusterError`` with the results when a rank raised."""
    if not results.ok:
        raise ClusterError(f"the training step failed on some ranks:\n{results!r}", results)
    return list(results.values)


def _empty_tensors() -> pd.DataFrame:
    return pd.DataFrame(columns=list(RANK_COLUMNS))
