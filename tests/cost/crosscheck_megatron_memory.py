"""Cross-check ``fastdist_lab.cost.estimate`` against Megatron-LM's own theoretical memory estimator.

Not collected by pytest (Megatron-LM is not a dependency). Get ``theoretical_memory_usage.py`` from
Megatron-LM (``megatron/training/`` on main; checked last at commit 1bcb3b9e of that file), e.g.::

    git clone --depth 1 https://github.com/NVIDIA/Megatron-LM /tmp/Megatron-LM
    python tests/cost/crosscheck_megatron_memory.py /tmp/Megatron-LM/megatron/training/theoretical_memory_usage.py

The file is loaded as is (its one relative import, ``.utils``, gets two no-op stand-ins), so nothing of
Megatron-LM beyond that file is needed. For ``--configs`` random dense configurations (hidden size, layers,
heads, grouped-query attention, kv_channels, SwiGLU, ffn size, vocabulary with Megatron-LM's padding,
sequence, micro-batch, tp, pp, dp, tied or untied embeddings, LayerNorm or RMSNorm, distributed optimizer,
micro-batches, sequence parallel, none or selective recompute, 1F1B or the interleaved schedule with 2-4 virtual
stages) it builds the ``argparse.Namespace`` Megatron-LM's training would pass and compares, within
``--tolerance`` (0.5%):

- ``weights_bytes + gradients_bytes + optimizer_bytes`` of ``report.most_loaded`` with
  ``compute_weight_and_optimizer_memory(args)``;
- ``activations_bytes + temporaries_bytes`` of stage 0 (the estimator counts its 5% allowance for temporaries
  as activations) with ``compute_activation_memory(args, num_microbatches)`` when
  sequence parallel is on (tp > 1) with selective recompute, else ``compute_activation_memory_without_sp``
  (the choice ``report_theoretical_memory`` makes).

The estimator assumes a fused attention kernel (no ``s x s`` scores stored: Korthikanti et al. 2022's Table 2
without its ``5 a s / h`` term), so the comparison uses ``Training(flash_attention=True)``, the default. Its
interleaved factor ``1 + (pp - 1) / (pp v)`` holds when the schedule reaches its full warm-up, ``m >= 2 pp``
micro-batches, which the sweep gives it. Not swept: full recompute, sequence parallel without selective
recompute, sequence-data (context) parallel, ZeRO 2-3, GPipe and zero-bubble schedules, which Megatron-LM's
estimator does not cover. Exit status 0 when every configuration agrees, 1 (listing the first mismatches) when
not.
"""

from __future__ import annotations

import argparse
import importlib.util
import math
import random
import sys
import types
from typing import Any

from fastdist_lab import Layout
from fastdist_lab.cost import VOCAB_PADDING, Training, Transformer, estimate

PACKAGE = "_megatron_estimator"


def load_estimator(path: str) -> types.ModuleType:
    """Megatron-LM's ``theoretical_memory_usage.py`` at ``path`` as a module."""
    package = types.ModuleType(PACKAGE)
    package.__path__ = []  # type: ignore[attr-defined]
    utils = types.ModuleType(f"{PACKAGE}.utils")
    utils.is_hybrid_model = lambda args: False  # type: ignore[attr-defined]
    utils.print_rank_0 = lambda *args, **kwargs: None  # type: ignore[attr-defined]
    sys.modules[PACKAGE], sys.modules[utils.__name__] = package, utils
    spec = importlib.util.spec_from_file_location(f"{PACKAGE}.theoretical_memory_usage", path)
    if spec is None or spec.loader is None:
        raise SystemExit(f"cannot load {path}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def random_config(rng: random.Random) -> dict[str, Any]:
    """One random dense configuration Megatron-LM's estimator covers."""
    tp = rng.choice([1, 1, 2, 4, 8])
    pp = rng.choice([1, 1, 2, 3, 4, 8])
    dp = rng.choice([1, 2, 3, 4, 8, 16, 64])
    heads = tp * rng.choice([1, 2, 3, 4, 6, 8, 12])
    groups = rng.choice([g for g in range(tp, heads + 1, tp) if heads % g == 0])
    head_size = rng.choice([32, 64, 80, 96, 128])
    hidden = heads * head_size if rng.random() < 0.7 else max(64, heads * head_size + 64 * rng.randint(-2, 4))
    kv_channels = None if hidden == heads * head_size and rng.random() < 0.5 else head_size
    swiglu = rng.random() < 0.5
    ffn = rng.choice([None, tp * 64 * rng.randint(hidden // (64 * tp) + 1, 8 * hidden // (64 * tp) + 1)])
    sequence_parallel = rng.random() < 0.5
    # Covered: sequence parallel with selective recompute, or no sequence parallel (none or selective;
    # Megatron-LM assumes fused attention in both). Sequence parallel at tp == 1 is switched off by Megatron-LM.
    recompute = "selective" if sequence_parallel and tp > 1 else rng.choice(["none", "selective"])
    virtual = rng.choice([1, 1, 2, 3, 4]) if pp > 1 else 1
    microbatches = rng.choice([None, rng.randint(1, 3 * pp)]) if virtual == 1 else pp * rng.randint(2, 4)
    return {
        "model": dict(
            hidden_size=hidden,
            num_layers=pp * virtual * rng.randint(1, 6),
            num_attention_heads=heads,
            num_query_groups=groups if groups != heads or rng.random() < 0.5 else None,
            kv_channels=kv_channels,
            ffn_hidden_size=ffn,
            swiglu=swiglu,
            vocab_size=rng.randint(1000, 260000),
            seq_length=tp * rng.choice([64, 128, 256, 512, 1024]),
            tied_embeddings=rng.random() < 0.5,
            normalization=rng.choice(["LayerNorm", "RMSNorm"]),
        ),
        "training": dict(
            micro_batch_size=rng.randint(1, 8),
            num_microbatches=microbatches,
            distributed_optimizer=rng.random() < 0.5,
            sequence_tensor_parallel=sequence_parallel,
            recompute=recompute,
            schedule="interleaved-1f1b" if virtual > 1 else "1f1b",
            virtual_pipeline_stages=virtual,
        ),
        "layout": dict(tensor_parallel=tp, pipeline_parallel=pp, world_size=tp * pp * dp),
    }


def megatron_args(model: Transformer, training: Training, layout: Layout) -> argparse.Namespace:
    """The ``argparse.Namespace`` Megatron-LM's training would build for this set-up (after validation)."""
    tp, pp = layout.tensor_parallel, layout.pipeline_parallel
    multiple = VOCAB_PADDING * tp  # megatron/training/vocab_utils.py: make_vocab_size_divisible_by * tp
    return argparse.Namespace(
        hidden_size=model.hidden_size,
        num_layers=model.num_layers,
        num_attention_heads=model.num_attention_heads,
        group_query_attention=model.num_query_groups != model.num_attention_heads,
        num_query_groups=model.num_query_groups,
        kv_channels=model.kv_channels,
        ffn_hidden_size=model.ffn_hidden_size,
        swiglu=model.swiglu,
        normalization=model.normalization,
        padded_vocab_size=int(math.ceil(model.vocab_size / multiple) * multiple),
        untie_embeddings_and_output_weights=not model.tied_embeddings,
        seq_length=model.seq_length,
        micro_batch_size=training.micro_batch_size,
        tensor_model_parallel_size=tp,
        pipeline_model_parallel_size=pp,
        virtual_pipeline_model_parallel_size=(
            training.virtual_pipeline_stages if training.virtual_pipeline_stages > 1 else None
        ),
        data_parallel_size=layout.data_parallel,
        world_size=layout.world_size,
        use_distributed_optimizer=training.distributed_optimizer,
        sequence_parallel=training.sequence_tensor_parallel and tp > 1,  # arguments.py disables it at tp == 1
        recompute_granularity=None if training.recompute == "none" else training.recompute,
        num_experts=None,
        moe_layer_freq=1,
        moe_ffn_hidden_size=None,
        moe_shared_expert_intermediate_size=None,
        moe_latent_size=None,
        moe_router_topk=2,
        mtp_num_layers=None,
        multi_latent_attention=False,
        add_bias_linear=True,
        expert_tensor_parallel_size=tp,
        expert_model_parallel_size=1,
    )


def compare(megatron: types.ModuleType, config: dict[str, Any], tolerance: float) -> tuple[list[str], float]:
    """Mismatches (empty when ours and Megatron-LM's agree within ``tolerance``) for one configuration,
    and the largest relative difference seen."""
    model = Transformer(**config["model"])
    training = Training(**config["training"])
    layout = Layout(local_world_size=config["layout"]["world_size"], **config["layout"])
    report = estimate(layout, model, training)
    args = megatron_args(model, training, layout)
    ours_states = float(report.most_loaded[["weights_bytes", "gradients_bytes", "optimizer_bytes"]].sum())
    theirs_states = megatron.compute_weight_and_optimizer_memory(args)
    if args.sequence_parallel and args.recompute_granularity == "selective":
        theirs_activations = megatron.compute_activation_memory(args, training.num_microbatches)
    else:
        theirs_activations = megatron.compute_activation_memory_without_sp(args, training.num_microbatches)
    # The estimator's figure includes its 5% allowance for temporaries, which the lab reports apart.
    ours_activations = float(report.memory[["activations_bytes", "temporaries_bytes"]].iloc[0].sum())
    problems, worst = [], 0.0
    for what, ours, theirs in (
        ("weights+gradients+optimizer", ours_states, theirs_states),
        ("activations", ours_activations, theirs_activations),
    ):
        worst = max(worst, abs(ours - theirs) / abs(theirs))
        if abs(ours - theirs) > tolerance * abs(theirs):
            difference = f"{ours / theirs - 1:+.3%}"
            problems.append(f"{what}: ours {ours:.0f} vs Megatron-LM {theirs:.0f} ({difference}) for {config}")
    return problems, worst


def main(argv: list[str] | None = None) -> int:
    """Run the sweep; print a summary and return the exit status."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("estimator", help="path to Megatron-LM's megatron/training/theoretical_memory_usage.py")
    parser.add_argument("--configs", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--tolerance", type=float, default=0.005)
    args = parser.parse_args(argv)
    megatron = load_estimator(args.estimator)
    rng = random.Random(args.seed)
    problems: list[str] = []
    worst = 0.0
    covered: dict[str, int] = {}
    for _ in range(args.configs):
        config = random_config(rng)
        found, deviation = compare(megatron, config, args.tolerance)
        problems += found
        worst = max(worst, deviation)
        training, tp = config["training"], config["layout"]["tensor_parallel"]
        key = "compute_activation_memory" if training["sequence_tensor_parallel"] and tp > 1 else "without_sp"
        optimizer = "distributed optimizer" if training["distributed_optimizer"] else "ZeRO 0"
        key += f", {training['recompute']}, {optimizer}"
        key += ", interleaved" if training["virtual_pipeline_stages"] > 1 else ""
        covered[key] = covered.get(key, 0) + 1
    if problems:
        print(f"{len(problems)} mismatches in {args.configs} configurations; first ones:")
        print("\n".join(problems[:10]))
        return 1
    print(
        f"equal to Megatron-LM's estimator within {args.tolerance:.1%}: {args.configs} configurations "
        f"({'; '.join(f'{k}: {v}' for k, v in sorted(covered.items()))}); largest difference {worst:.4%}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
