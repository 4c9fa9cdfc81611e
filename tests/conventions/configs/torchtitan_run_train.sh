#!/usr/bin/bash
# In the shape of torchtitan's run_train.sh (August 2026): a --module/--config launch. Megatron-LM's
# --tensor-model-parallel-size is mentioned in this comment only.
set -ex
NGPU=${NGPU:-"8"}
MODULE=${MODULE:-"deepseek_v3"}
CONFIG=${CONFIG:-"deepseek_v3_16b"}
COMM_MODE=${COMM_MODE:-""}

if [ -n "$COMM_MODE" ]; then
    NGPU="${NGPU}" LOCAL_RANK=0 python3 -m torchtitan.train --module ${MODULE} --config ${CONFIG} "$@" --comm.mode=${COMM_MODE}
else
    torchrun --nproc_per_node=${NGPU} --rdzv_backend c10d --rdzv_endpoint="localhost:0" \
    --local-ranks-filter 0 --role rank --tee 3 \
    -m torchtitan.train --module ${MODULE} --config ${CONFIG} \
    --parallelism.expert_parallel_degree 4 "$@"
fi
