"""One measured training run (``PublishedRun``) and how the runs are kept: as package data, one TOML file per source
in ``runs/`` (its citation in a ``[source]`` table, what its runs share in ``[defaults]``, then one ``[[runs]]`` entry
per run, each as the source reports it), read by ``published.load_runs``.

A run's measurement is kept as the source gives it (``measured`` in the unit ``measured_as`` names) and turned into
seconds per step here, with the source's own FLOP count where it reports TFLOP/s (``flops``): ``"narayanan"``
(Narayanan et al. 2021, equation 3), ``"model"`` (Megatron-LM's ``num_floating_point_operations``, the step-time
model's ``model_flops``) or ``"megatron-r0.8-moe"`` (that of Megatron-LM r0.8.0, which does not count a MoE router's
GEMM).

*A new published run* is an entry in its source's file (a new source, a new file listed in ``published.py``); the
model is never fitted to it unless it is marked ``calibration`` (``docs/validation.md``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ...errors import CostError
from ...setup import Hardware, Transformer
from ..formulas.step import model_flops

RUNS = Path(__file__).with_name("runs")
"""The folder of the published runs' files (package data)."""

MEASURES: tuple[str, ...] = ("seconds", "tflops_per_gpu", "tokens_per_second", "tokens_per_second_per_gpu")
"""The units a source reports its measurement in (``measured_as``)."""


def narayanan_flops(batch: int, seq: int, layers: int, hidden: int, vocab: int = 51200) -> float:
    """FLOPs of one step with full activation recompute as Narayanan et al. 2021 count them (Section 5.1,
    equation 3): ``96 B s l h^2 (1 + s / 6h + V / 16 l h)``."""
    return 96.0 * batch * seq * layers * hidden**2 * (1 + seq / (6 * hidden) + vocab / (16 * layers * hidden))


def megatron_r080_flops(model: Transformer, batch: int, tensor_parallel: int = 1) -> float:
    """FLOPs of ``batch`` sequences as Megatron-LM r0.8.0's ``num_floating_point_operations`` counts them for a MoE:
    ``model_flops`` less the router's ``h x E`` GEMM, which that release does not count (under 0.1%)."""
    router = 6.0 * batch * model.seq_length * model.hidden_size * model.num_experts * model.moe_layers
    return float(model_flops(model, batch, tensor_parallel)) - router


def gpt_model(hidden: int, layers: int, heads: int, vocab: int = 51200, seq: int = 2048) -> dict[str, Any]:
    """A GPT-3-style model (Brown et al. 2020): LayerNorm, GeLU MLP of 4 h, tied embeddings."""
    return dict(hidden_size=hidden, num_layers=layers, num_attention_heads=heads, vocab_size=vocab, seq_length=seq)


@dataclass(frozen=True)
class PublishedRun:
    """One measured run: ``model`` (``Transformer`` fields), ``hardware`` (a preset), the layout sizes, the
    ``training`` (``Training`` fields), the sequences per step, the measured ``seconds`` per step, its
    ``source``. ``lighter_ends``: the first and the last stage hold one layer fewer (Llama 3's split).
    ``expert_parallel`` and ``expert_tensor_parallel`` place a mixture of experts' experts (the ``Layout`` fields of
    the same names; ``PUBLISHED_MOE_RUNS``). ``engine``: the training engine that ran it (``Training(engine=...)``,
    one of ``ENGINES``), which the prediction uses. ``inter_node_GBps``: the network bandwidth per GPU of the cluster
    it ran on, where its nodes had fewer network adapters than the preset's reference node (the preset's figure
    otherwise)."""

    name: str
    source: str
    model: dict[str, Any]
    hardware: str
    gpus: int
    tensor_parallel: int
    pipeline_parallel: int
    training: dict[str, Any]
    global_batch_size: int
    seconds: float
    measured_from: str
    sequence_data_parallel: int = 1
    choices: dict[str, tuple[Any, ...]] = field(default_factory=dict)
    calibration: bool = False
    lighter_ends: bool = False
    expert_parallel: int = 1
    expert_tensor_parallel: int | None = None
    engine: str = "megatron"
    inter_node_GBps: float | None = None

    def transformer(self) -> Transformer:
        """The model as a ``Transformer``."""
        return Transformer(**self.model)

    def machine(self) -> Hardware:
        """The hardware it ran on: its preset, with its cluster's ``inter_node_GBps`` where it gives one."""
        hardware = Hardware.preset(self.hardware)
        if self.inter_node_GBps is not None:
            hardware = hardware.replace(inter_node_GBps=self.inter_node_GBps)
        return hardware


def measured_seconds(entry: dict[str, Any]) -> float:
    """Seconds per step of a run's file entry, from its ``measured`` value in ``measured_as`` units."""
    value, unit, model = entry["measured"], entry["measured_as"], entry["model"]
    batch, gpus, tokens = entry["global_batch_size"], entry["gpus"], entry["global_batch_size"] * model["seq_length"]
    if unit == "seconds":
        return float(value)
    if unit == "tokens_per_second":
        return tokens / value
    if unit == "tokens_per_second_per_gpu":
        return tokens / (value * gpus)
    counts = {
        "narayanan": lambda: narayanan_flops(batch, model["seq_length"], model["num_layers"], model["hidden_size"]),
        "model": lambda: float(model_flops(Transformer(**model), batch, entry["tensor_parallel"])),
        "megatron-r0.8-moe": lambda: megatron_r080_flops(Transformer(**model), batch, entry["tensor_parallel"]),
    }
    if unit != "tflops_per_gpu" or entry.get("flops") not in counts:
        raise CostError(f"{entry['name']}: measured_as={unit!r} / flops={entry.get('flops')!r} is not a known unit")
    return counts[entry["flops"]]() / (value * 1e12 * gpus)


def read_source(name: str) -> dict[str, Any]:
    """The document of ``runs/<name>.toml`` (a source's file)."""
    try:
        import tomllib
    except ImportError:  # Python 3.10: the backport the project depends on there
        import tomli as tomllib

    return tomllib.loads((RUNS / f"{name}.toml").read_text(encoding="utf-8"))
