"""One measured training run as ``published`` and ``published_held_out`` record it (``PublishedRun``), and the helpers
both use: Narayanan et al. 2021's FLOP count, the GPT-3-style model and Megatron-LM's rule for virtual stages."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .hardware import Hardware
from .model import Transformer


def narayanan_flops(batch: int, seq: int, layers: int, hidden: int, vocab: int = 51200) -> float:
    """FLOPs of one step with full activation recompute as Narayanan et al. 2021 count them (Section 5.1,
    equation 3): ``96 B s l h^2 (1 + s / 6h + V / 16 l h)``."""
    return 96.0 * batch * seq * layers * hidden**2 * (1 + seq / (6 * hidden) + vocab / (16 * layers * hidden))


@dataclass(frozen=True)
class PublishedRun:
    """One measured run: ``model`` (``Transformer`` fields), ``hardware`` (a preset), the layout sizes, the
    ``training`` (``Training`` fields), the sequences per step, the measured ``seconds`` per step, its
    ``source``. ``lighter_ends``: the first and the last stage hold one layer fewer (Llama 3's split).
    ``expert_parallel`` and ``expert_tensor_parallel`` place a mixture of experts' experts (the ``Layout`` fields of
    the same names; ``PUBLISHED_MOE_RUNS``). ``engine``: the training engine that ran it (``Training(engine=...)``,
    one of ``engines.ENGINES``), which the prediction uses. ``inter_node_GBps``: the network bandwidth per GPU of
    the cluster it ran on, where its nodes had fewer network adapters than the preset's reference node (the
    preset's figure otherwise)."""

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


def gpt_model(hidden: int, layers: int, heads: int, vocab: int = 51200, seq: int = 2048) -> dict[str, Any]:
    """A GPT-3-style model (Brown et al. 2020): LayerNorm, GeLU MLP of 4 h, tied embeddings."""
    return dict(hidden_size=hidden, num_layers=layers, num_attention_heads=heads, vocab_size=vocab, seq_length=seq)


def equal_chunks(layers: int, pipeline: int) -> tuple[int, ...]:
    """Virtual stages that split ``layers`` into equal chunks over ``pipeline`` stages (Megatron-LM's rule for
    the interleaved schedule)."""
    return (1,) if pipeline == 1 else tuple(v for v in range(1, layers // pipeline + 1) if layers % (pipeline * v) == 0)
