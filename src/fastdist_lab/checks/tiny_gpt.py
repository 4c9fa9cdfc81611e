"""A small GPT-style decoder in plain torch, split over a layout the way Megatron-LM and Fast-LLM split it.

One implementation serves both sides of ``check_training``: a rank builds the layers of its pipeline stages with
its tensor shards and its groups (``Parallel``), the one-process reference builds every layer whole with no group
(every collective is then the identity). What is split, and how (Shoeybi et al. 2019, section 3; Korthikanti et
al. 2022, section 4.2.2 for sequence-tensor parallelism; Fast-LLM at commit 91b28fab for sequence-data parallelism):

- attention: query, key and value are column-parallel (the heads split over the tensor group), the dense output
  row-parallel; the MLP's first linear column-parallel, its second row-parallel. Keys have no bias: adding one
  shifts every score of a query alike, which softmax cancels, so its gradient would be rounding noise alone;
- the word embedding and the output layer are vocabulary-parallel (rows split), the loss the vocabulary-parallel
  cross-entropy (``parallel_ops.vocab_parallel_cross_entropy``);
- with ``sequence_tensor_parallel`` the residual stream is split along the sequence over the tensor group:
  all-gather before each column-parallel linear, reduce-scatter after each row-parallel one;
- sequence-data parallel: each rank holds one contiguous chunk of every sequence; keys and values are all-gathered
  over the sequence-data group and cut at the end of this rank's chunk (Fast-LLM's
  ``fast_llm/layers/attention/attention.py``), so that causal attention sees the whole past.

Dropout draws from the generators of the rank's ``Distributed`` exactly where Fast-LLM (commit 91b28fab) does: the
embedding's and both residual dropouts of a block use ``tp_generator`` with sequence-tensor parallelism and
``pp_generator`` without (``fast_llm/layers/language_model/embedding.py`` line 143,
``fast_llm/layers/decoder/block.py`` line 134); attention-probability dropout always uses ``tp_generator``
(``fast_llm/layers/attention/attention.py`` line 373). Fast-LLM swaps the default generator's state
(``set_generator``); here the generator is passed to the draw, which is the same stream and safe in threads.
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn.functional as F  # noqa: N812 - torch's own spelling

from ..errors import LayoutError
from ..validation import check_int
from .moe_layer import MoE, is_expert
from .parallel_ops import (
    Group,
    copy_to_group,
    gather_along,
    reduce_from_group,
    reduce_scatter_along,
    vocab_parallel_cross_entropy,
)

MAX_TINY_SIZE = 2**16
"""The most of any one size of ``TinyGPT`` (layers, hidden size, vocabulary, ...)."""
MAX_TINY_PARAMETERS = 2**28
"""The most parameters of a ``TinyGPT`` (1 GiB in float32): it is built whole on CPU, once a rank and once more."""


@dataclass(frozen=True, repr=False)
class TinyGPT:
    """The sizes of the decoder (defaults: 4 layers of hidden size 64, 4 heads, vocabulary 64, sequences of 16).

    ``num_experts`` > 0 makes every block's MLP a mixture of experts (``checks.moe_layer``: a top-``top_k`` router
    and ``num_experts`` experts of ``ffn_size``); 0 (the default) is the dense MLP.
    """

    vocab_size: int = 64
    hidden_size: int = 64
    heads: int = 4
    layers: int = 4
    ffn_size: int = 256
    sequence_length: int = 16
    num_experts: int = 0
    top_k: int = 2

    def __post_init__(self) -> None:
        for name in ("vocab_size", "hidden_size", "heads", "layers", "ffn_size", "sequence_length", "top_k"):
            check_int(f"TinyGPT {name}", getattr(self, name), minimum=1, maximum=MAX_TINY_SIZE)
        check_int("TinyGPT num_experts", self.num_experts, minimum=0, maximum=MAX_TINY_SIZE)
        if self.parameter_count() > MAX_TINY_PARAMETERS:
            raise LayoutError(
                f"TinyGPT of {self.parameter_count():,} parameters is past {MAX_TINY_PARAMETERS:,}: a model that"
                " every rank and the one-process reference build whole in CPU memory must stay small"
            )
        if self.hidden_size % self.heads:
            raise LayoutError(f"TinyGPT heads={self.heads} must divide hidden_size={self.hidden_size}")
        if self.num_experts and self.top_k > self.num_experts:
            raise LayoutError(f"TinyGPT top_k={self.top_k} must be at most num_experts={self.num_experts}")

    def __repr__(self) -> str:
        names = ["vocab_size", "hidden_size", "heads", "layers", "ffn_size", "sequence_length"]
        names += ["num_experts", "top_k"] if self.num_experts else []
        return f"TinyGPT({', '.join(f'{name}={getattr(self, name)}' for name in names)})"

    def check_experts(self, expert_parallel: int, expert_tensor: int) -> None:
        """Raise ``LayoutError`` unless the experts split over ``expert_parallel`` ranks and each expert over
        ``expert_tensor`` ranks (a dense model on a layout with experts is refused too)."""
        if not self.num_experts:
            raise LayoutError("the layout has experts and the model none: use TinyGPT(num_experts=...)")
        if self.num_experts % expert_parallel:
            raise LayoutError(f"expert_parallel={expert_parallel} must divide num_experts={self.num_experts}")
        if self.ffn_size % expert_tensor:
            raise LayoutError(f"expert_tensor_parallel={expert_tensor} must divide ffn_size={self.ffn_size}")

    def parameter_count(self) -> int:
        """The weights of the model's matrices (embedding, output layer, attention, MLPs or experts and routers):
        every parameter but the biases and norms, what ``MAX_TINY_PARAMETERS`` bounds."""
        hidden, ffn = self.hidden_size, self.ffn_size
        mlp = max(1, self.num_experts) * 2 * hidden * ffn + (hidden * self.num_experts if self.num_experts else 0)
        return 2 * self.vocab_size * hidden + self.layers * (4 * hidden * hidden + mlp)

    @property
    def head_size(self) -> int:
        """hidden_size / heads."""
        return self.hidden_size // self.heads

    def check_layout(self, tensor: int, sequence_data: int, sequence_tensor: bool, stages: int) -> None:
        """Raise ``LayoutError`` unless this model splits over ``tensor`` ranks, ``sequence_data`` ranks and
        ``stages`` pipeline stages (every number it divides named)."""
        rules = [
            (self.heads, tensor, "heads", "tensor_parallel"),
            (self.vocab_size, tensor, "vocab_size", "tensor_parallel"),
            (self.ffn_size, tensor, "ffn_size", "tensor_parallel"),
            (self.sequence_length, sequence_data, "sequence_length", "sequence_data_parallel"),
        ]
        if sequence_tensor:
            chunk = self.sequence_length // max(sequence_data, 1)
            what = f"sequence chunk (sequence_length {self.sequence_length} / sequence_data_parallel {sequence_data})"
            rules.append((chunk, tensor, what, "sequence_tensor_parallel over tensor_parallel"))
        for total, parts, what, by in rules:
            if total % parts:
                raise LayoutError(f"{by}={parts} must divide the model's {what}={total}")
        if stages > self.layers:
            raise LayoutError(f"{stages} pipeline stages need at least {stages} layers; the model has {self.layers}")

    def initial_weights(self, seed: int) -> dict[str, torch.Tensor]:
        """Every parameter of the whole model by name, drawn from ``seed`` (the same on every machine)."""
        generator = torch.Generator().manual_seed(seed)
        model = StageModule(self, range(self.layers), True, True, Parallel())
        out = {}
        for name, param in model.named_parameters():
            if name.endswith("norm_1.weight") or name.endswith("norm_2.weight") or name.endswith("norm.weight"):
                value = 1.0 + 0.1 * torch.randn(param.shape, generator=generator)
            elif param.dim() == 1:
                value = 0.02 * torch.randn(param.shape, generator=generator)
            else:
                value = torch.randn(param.shape, generator=generator) / math.sqrt(param.shape[-1])
            out[name] = value
        return out


def digest(tensor: torch.Tensor) -> str:
    """A short fingerprint of a tensor's exact bytes (equal tensors, equal digests)."""
    data = tensor.detach().to("cpu").contiguous().numpy().tobytes()
    return hashlib.blake2b(data, digest_size=8).hexdigest()


@dataclass
class Recorder:
    """What a rank's dropout draws and replicated activations were, in the order they happened."""

    masks: list[tuple[str, str, tuple[int, ...], str]] = field(default_factory=list)
    """(site, generator, shape, digest of the kept-mask) per draw."""
    activations: list[tuple[str, str]] = field(default_factory=list)
    """(site, digest) of each tensor every member of the tensor group must hold identically."""
    misrouted: list[tuple[str, int, int]] = field(default_factory=list)
    """(site, sending rank, rows) per sender whose rows came for experts this rank does not hold."""


@dataclass
class Parallel:
    """One rank's place in the split: its groups (``None`` for size 1), ranks and sizes, dropout and generators.

    ``Parallel()`` is the one-process reference: no group, nothing split, no dropout.
    """

    tensor: Group = None
    tensor_rank: int = 0
    tensor_size: int = 1
    sequence_data: Group = None
    sequence_data_rank: int = 0
    sequence_data_size: int = 1
    sequence_tensor_parallel: bool = False
    dropout: float = 0.0
    generators: dict[str, torch.Generator] = field(default_factory=dict)
    recorder: Recorder | None = None
    expert: Group = None
    expert_rank: int = 0
    expert_size: int = 1
    expert_members: tuple[int, ...] = ()
    """The global ranks of the ``expert`` group in group-rank order (empty: no group)."""
    expert_tensor: Group = None
    expert_tensor_rank: int = 0
    expert_tensor_size: int = 1
    misroute: bool = False
    """The fault ``TrainingFault.misrouted``: send the MoE's rows one expert rank further on."""
    recompute: str = "none"
    """Activation recompute (``cost.RECOMPUTE``): ``"full"`` runs each block under ``torch.utils.checkpoint``
    (only its input is kept, the block runs again in the backward), ``"selective"`` only the attention core
    (scores, softmax, their product with the values; Korthikanti et al. 2022, Section 5)."""

    def checkpointed(self, what: str, function: Any, *tensors: torch.Tensor) -> torch.Tensor:
        """``function(*tensors)``, under ``torch.utils.checkpoint`` when ``recompute`` covers ``what`` (``"block"``
        for full, ``"attention"`` for selective or full recompute of the attention core)."""
        covered = {"full": ("block",), "selective": ("attention",)}.get(self.recompute, ())
        if what not in covered:
            return function(*tensors)
        from torch.utils.checkpoint import checkpoint

        return checkpoint(function, *tensors, use_reentrant=False)

    def tensor_input(self, tensor: torch.Tensor) -> torch.Tensor:
        """The replicated input of a column-parallel linear: copied (or gathered along the sequence) over the
        tensor group."""
        if self.sequence_tensor_parallel:
            return gather_along(tensor, self.tensor, 1)
        return copy_to_group(tensor, self.tensor)

    def tensor_output(self, tensor: torch.Tensor) -> torch.Tensor:
        """The partial output of a row-parallel linear summed (or reduce-scattered along the sequence)."""
        if self.sequence_tensor_parallel:
            return reduce_scatter_along(tensor, self.tensor, 1)
        return reduce_from_group(tensor, self.tensor)

    def residual_generator(self) -> str:
        """Which generator the embedding and residual dropouts draw from (Fast-LLM: ``tp`` with sequence-tensor
        parallelism, where every tensor rank holds other tokens, else ``pp``)."""
        return "tp" if self.sequence_tensor_parallel else "pp"

    def drop(self, tensor: torch.Tensor, generator: str, site: str) -> torch.Tensor:
        """Dropout of probability ``dropout`` with a mask drawn from this rank's ``generator`` (recorded)."""
        if self.dropout == 0.0:
            return tensor
        source = self.generators[generator]
        keep = torch.rand(tensor.shape, generator=source, device=source.device) >= self.dropout
        if self.recorder is not None:
            self.recorder.masks.append((site, generator, tuple(tensor.shape), digest(keep)))
        return tensor * keep / (1.0 - self.dropout)

    def note(self, site: str, tensor: torch.Tensor) -> None:
        """Record a replicated activation (only when dropout is on: it is what dropout could break)."""
        if self.recorder is not None and self.dropout > 0.0:
            self.recorder.activations.append((site, digest(tensor)))


def _parameter(*shape: int, split: int | None) -> torch.nn.Parameter:
    param = torch.nn.Parameter(torch.empty(*shape))
    param.tensor_split = split  # type: ignore[attr-defined]  # read by split_dim
    return param


def split_dim(param: torch.Tensor) -> int | None:
    """The axis a parameter is split along over the tensor group (``None``: replicated on every tensor rank)."""
    return getattr(param, "tensor_split", None)


class _Norm(torch.nn.Module):
    def __init__(self, hidden: int):
        super().__init__()
        self.weight = _parameter(hidden, split=None)
        self.bias = _parameter(hidden, split=None)

    def forward(self, tensor: torch.Tensor) -> torch.Tensor:
        return F.layer_norm(tensor, tensor.shape[-1:], self.weight, self.bias)


class _Linear(torch.nn.Module):
    """A linear layer's shard: column-parallel (``split=0``: output rows split) or row-parallel (``split=1``: input
    columns split, the bias replicated and added after the reduction by the caller)."""

    def __init__(self, inputs: int, outputs: int, split: int, bias: bool = True):
        super().__init__()
        self.weight = _parameter(outputs, inputs, split=split)
        self.bias = _parameter(outputs, split=0 if split == 0 else None) if bias else None
        self.split = split

    def forward(self, tensor: torch.Tensor) -> torch.Tensor:
        return F.linear(tensor, self.weight, self.bias if self.split == 0 else None)


class _Attention(torch.nn.Module):
    def __init__(self, model: TinyGPT, par: Parallel, site: str):
        super().__init__()
        local = model.hidden_size // par.tensor_size
        self.query = _Linear(model.hidden_size, local, split=0)
        self.key = _Linear(model.hidden_size, local, split=0, bias=False)  # softmax cancels a key bias's gradient
        self.value = _Linear(model.hidden_size, local, split=0)
        self.dense = _Linear(local, model.hidden_size, split=1)
        self.heads = model.heads // par.tensor_size
        self.head_size = model.head_size
        self.par, self.site = par, site

    def forward(self, tensor: torch.Tensor) -> torch.Tensor:
        par, (batch, length, _) = self.par, tensor.shape
        query, key, value = self.query(tensor), self.key(tensor), self.value(tensor)
        keys = (par.sequence_data_rank + 1) * length  # this chunk's end: causal attention needs nothing later
        key = gather_along(key, par.sequence_data, 1)[:, :keys]
        value = gather_along(value, par.sequence_data, 1)[:, :keys]
        query = query.view(batch, length, self.heads, self.head_size).transpose(1, 2)
        key = key.reshape(batch, keys, self.heads, self.head_size).transpose(1, 2)
        value = value.reshape(batch, keys, self.heads, self.head_size).transpose(1, 2)
        context = par.checkpointed("attention", self.core, query, key, value)
        return self.dense(context.transpose(1, 2).reshape(batch, length, self.heads * self.head_size))

    def core(self, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor) -> torch.Tensor:
        """Causal attention of this rank's queries over the keys and values up to its chunk's end."""
        par, length, keys = self.par, query.shape[2], key.shape[2]
        scores = query @ key.transpose(-1, -2) / math.sqrt(self.head_size)
        positions = par.sequence_data_rank * length + torch.arange(length, device=query.device)
        future = torch.arange(keys, device=query.device)[None, :] > positions[:, None]
        probs = scores.masked_fill(future, float("-inf")).softmax(dim=-1)
        probs = par.drop(probs, "tp", f"{self.site}.attention_probs")
        return probs @ value


class _Block(torch.nn.Module):
    def __init__(self, model: TinyGPT, par: Parallel, site: str):
        super().__init__()
        self.norm_1 = _Norm(model.hidden_size)
        self.attention = _Attention(model, par, site)
        self.norm_2 = _Norm(model.hidden_size)
        if model.num_experts:
            self.moe = MoE(model.hidden_size, model.ffn_size, model.num_experts, model.top_k, par, f"{site}.moe")
        else:
            self.fc1 = _Linear(model.hidden_size, model.ffn_size // par.tensor_size, split=0)
            self.fc2 = _Linear(model.ffn_size // par.tensor_size, model.hidden_size, split=1)
        self.par, self.site = par, site

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        par, generator = self.par, self.par.residual_generator()
        mixed = par.tensor_input(self.norm_1(hidden))
        par.note(f"{self.site}.attention_input", mixed)
        out = par.tensor_output(self.attention(mixed)) + self.attention.dense.bias
        hidden = hidden + par.drop(out, generator, f"{self.site}.attention_dropout")
        if hasattr(self, "moe"):
            if par.sequence_tensor_parallel:  # this rank's sequence chunk: its own tokens
                out = self.moe(self.norm_2(hidden), replicated=False)
            else:
                out = self.moe(par.tensor_input(self.norm_2(hidden)), replicated=True)
            return hidden + par.drop(out, generator, f"{self.site}.mlp_dropout")
        mixed = par.tensor_input(self.norm_2(hidden))
        par.note(f"{self.site}.mlp_input", mixed)
        out = par.tensor_output(self.fc2(F.gelu(self.fc1(mixed)))) + self.fc2.bias
        return hidden + par.drop(out, generator, f"{self.site}.mlp_dropout")


class _Embedding(torch.nn.Module):
    def __init__(self, model: TinyGPT, par: Parallel):
        super().__init__()
        self.word = _parameter(model.vocab_size // par.tensor_size, model.hidden_size, split=0)
        self.position = _parameter(model.sequence_length, model.hidden_size, split=None)
        self.par = par

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        par, length = self.par, tokens.shape[1]
        local = tokens - par.tensor_rank * self.word.shape[0]
        mine = (local >= 0) & (local < self.word.shape[0])
        embedded = F.embedding(local * mine, self.word) * mine.unsqueeze(-1)
        first = par.sequence_data_rank * length
        if par.sequence_tensor_parallel:
            embedded = reduce_scatter_along(embedded, par.tensor, 1)
            first += par.tensor_rank * embedded.shape[1]
        else:
            embedded = reduce_from_group(embedded, par.tensor)
        embedded = embedded + self.position[first : first + embedded.shape[1]]
        return par.drop(embedded, par.residual_generator(), "embedding.dropout")


class _Head(torch.nn.Module):
    def __init__(self, model: TinyGPT, par: Parallel):
        super().__init__()
        self.norm = _Norm(model.hidden_size)
        self.output = _parameter(model.vocab_size // par.tensor_size, model.hidden_size, split=0)
        self.par = par

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        mixed = self.par.tensor_input(self.norm(hidden))
        self.par.note("head.input", mixed)
        return F.linear(mixed, self.output)


class StageModule(torch.nn.Module):
    """The layers ``layer_ids`` of a ``TinyGPT`` (with the embedding when ``first``, the final norm and output layer
    when ``last``) as one rank holds them; parameter names are the whole model's (``layers.3.fc1.weight``).

    ``skip`` (a fault for tests) names layers whose parameters exist but which the forward pass leaves out.
    """

    def __init__(
        self, model: TinyGPT, layer_ids: range, first: bool, last: bool, par: Parallel, skip: frozenset = frozenset()
    ):
        super().__init__()
        self.embedding = _Embedding(model, par) if first else None
        self.layers = torch.nn.ModuleDict({str(i): _Block(model, par, f"layers.{i}") for i in layer_ids})
        self.head = _Head(model, par) if last else None
        self.skip = skip

    def forward(self, tensor: torch.Tensor) -> torch.Tensor:
        """Tokens (first stage) or hidden states in; hidden states or this rank's vocabulary slice of logits out."""
        if self.embedding is not None:
            tensor = self.embedding(tensor)
        for index, block in self.layers.items():
            if int(index) not in self.skip:
                tensor = block.par.checkpointed("block", block, tensor)
        return tensor if self.head is None else self.head(tensor)

    def load(
        self, weights: dict[str, torch.Tensor], tensor_rank: int, tensor_size: int, expert_tensor: tuple = (0, 1)
    ) -> None:
        """Copy this rank's shard of each parameter from the whole model's ``weights`` (an expert's weights: shard
        ``expert_tensor[0]`` of ``expert_tensor[1]``)."""
        with torch.no_grad():
            for name, param in self.named_parameters():
                index, parts = expert_tensor if is_expert(param) else (tensor_rank, tensor_size)
                param.copy_(shard_of(weights[name], split_dim(param), index, parts))


def shard_of(full: torch.Tensor, dim: int | None, index: int, parts: int) -> torch.Tensor:
    """Shard ``index`` of ``parts`` of ``full`` along ``dim`` (``full`` itself when replicated)."""
    if dim is None or parts == 1:
        return full
    size = full.shape[dim] // parts
    return full.narrow(dim, index * size, size)


def token_losses(logits: torch.Tensor, targets: torch.Tensor, par: Parallel) -> torch.Tensor:
    """Per-token cross-entropy of this rank's logits slice against ``targets`` (vocabulary-parallel)."""
    return vocab_parallel_cross_entropy(logits, targets, par.tensor, par.tensor_rank * logits.shape[-1])


def reference_step(
    model: TinyGPT, weights: dict[str, torch.Tensor], tokens: torch.Tensor, learning_rate: float
) -> dict[str, Any]:
    """One training step of the whole model in this process: mean cross-entropy over every token of ``tokens``
    (``[sequences, sequence_length + 1]``: inputs and next-token targets), backward, one SGD step. Returns the
    ``loss``, every parameter's ``grads`` and ``updated`` weights by name."""
    module = StageModule(model, range(model.layers), True, True, Parallel())
    module.load(weights, 0, 1)
    inputs, targets = tokens[:, :-1], tokens[:, 1:]
    loss = token_losses(module(inputs), targets, Parallel()).sum() / targets.numel()
    loss.backward()
    grads = {name: param.grad.detach().clone() for name, param in module.named_parameters()}
    torch.optim.SGD(module.parameters(), lr=learning_rate).step()
    updated = {name: param.detach().clone() for name, param in module.named_parameters()}
    return {"loss": float(loss.detach()), "grads": grads, "updated": updated}
