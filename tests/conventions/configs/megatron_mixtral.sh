#!/bin/bash
# A Mixtral-style MoE launch in the shape of Megatron-LM's examples/mixtral script, on 4 nodes.
GPUS_PER_NODE=8
NNODES=${SLURM_NNODES:-"4"}

DISTRIBUTED_ARGS=(
    --nproc_per_node $GPUS_PER_NODE
    --nnodes $NNODES
    --node_rank ${RANK:-"0"}
)
MOE_ARGS=(
    --num-experts 8
    --moe-router-topk 2
    --moe-token-dispatcher-type alltoall
)
MODEL_PARALLEL_ARGS=(
    --tensor-model-parallel-size 1
    --pipeline-model-parallel-size 4
    --expert-model-parallel-size 8
    --use-distributed-optimizer
    --sequence-parallel
)
if [ -n "${WANDB_API_KEY}" ]; then
    MODEL_PARALLEL_ARGS+=(
        --num-layers 32
    )
fi
torchrun ${DISTRIBUTED_ARGS[@]} pretrain_gpt.py \
    ${MOE_ARGS[@]} \
    ${MODEL_PARALLEL_ARGS[@]}
