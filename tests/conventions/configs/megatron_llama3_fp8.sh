#!/bin/bash
# A dense Llama-3 launch in the shape of Megatron-LM's examples/llama script (quoted array items, the entry script
# in a variable, an if block that echoes its name). For comparison, the torchtitan equivalent would be
# "NGPU=8 ./run_train.sh --parallelism.tensor_parallel_degree 2": a comment, not a command.
GPUS_PER_NODE=8
NUM_NODES=2
PRETRAIN_SCRIPT_PATH="pretrain_gpt.py"
TP_SIZE=2
CP_SIZE=2

DISTRIBUTED_ARGS=(
    --nproc_per_node $GPUS_PER_NODE
    --nnodes $NUM_NODES
)
DTYPE_ARGS=(
    "--fp8-format hybrid"
    "--fp8-amax-history-len 1024"
)
MODEL_PARALLEL_ARGS=(
    --tensor-model-parallel-size $TP_SIZE
    --context-parallel-size $CP_SIZE
    # --pipeline-model-parallel-size 4  # commented out: not set
    --sequence-parallel
)
TRAINING_ARGS=(--micro-batch-size 1 --bf16)
TRAINING_ARGS+=("--use-distributed-optimizer" "--overlap-grad-reduce")

if [ ! -f "$PRETRAIN_SCRIPT_PATH" ]; then
    echo "Error: pretrain_gpt.py not found (torchtitan users: see run_train.sh)"
    exit 1
fi

python -c "print('checking torchtitan.train is not installed')"

torchrun ${DISTRIBUTED_ARGS[@]} \
    "$PRETRAIN_SCRIPT_PATH" \
    ${TRAINING_ARGS[@]} \
    ${DTYPE_ARGS[@]} \
    ${MODEL_PARALLEL_ARGS[@]}
