#!/usr/bin/env bash
# NCCL path of fastdist_lab on a machine with GPUs: world size = number of visible GPUs (1 GPU works too).
#
#   scripts/gpu_check.sh            # uses $PYTHON or python3 with fastdist_lab installed (pip install -e .)
#
# Steps: (1) `fastdist-lab check --backend nccl` (on an even number of GPUs with experts too: --ep 2 --etp 1, an
# all-to-all over every expert group); (2) a LocalCluster with backend="auto" must pick NCCL, give
# each rank its own GPU, run an all-reduce on CUDA tensors and draw from CUDA generators; (3) the torchrun path
# writes a report that load_report reads; (4) asking NCCL for more ranks than GPUs fails with a one-line message;
# (5) one real training step on the NCCL groups (torch's pipeline schedules, point-to-point on the pool's NCCL
# pipeline group) agrees with one process, and with dropout every mask is the draw of the CUDA generator the
# layout seeds. Exit code 0 when every step passed. Reports go to $GPU_CHECK_OUT (default: a temporary directory).
set -uo pipefail

PY=${PYTHON:-python3}
export PYTHONUNBUFFERED=1
failures=0

step() { printf '\n== %s\n' "$*"; }
fail() { echo "FAILED: $*"; failures=$((failures + 1)); }

NGPU=$("$PY" -c 'import torch; print(torch.cuda.device_count() if torch.cuda.is_available() else 0)') || {
    echo "cannot import torch with $PY"; exit 2; }
OUT_DIR=${GPU_CHECK_OUT:-$(mktemp -d -t fastdist-gpu-check-XXXXXX)}
mkdir -p "$OUT_DIR"
step "environment"
"$PY" -c 'import sys, torch; print("python", sys.version.split()[0], "| torch", torch.__version__, "| cuda", torch.version.cuda, "| nccl", torch.cuda.nccl.version() if torch.cuda.is_available() else None)'
command -v nvidia-smi >/dev/null && nvidia-smi -L
echo "visible GPUs: $NGPU; reports in $OUT_DIR"
if [ "$NGPU" -lt 1 ]; then
    echo "no GPU visible: nothing to check here (the gloo path is covered by the test suite)"
    exit 2
fi

# Factors that fit the GPU count: tp 2 when even, pp 2 when divisible by 4, sdp 2 when divisible by 8.
TP=1; PP=1; SDP=1
[ $((NGPU % 2)) -eq 0 ] && TP=2
[ $((NGPU % 4)) -eq 0 ] && PP=2
[ $((NGPU % 8)) -eq 0 ] && SDP=2
LAYOUT=(--world-size "$NGPU" --tp "$TP" --pp "$PP" --sdp "$SDP")

step "1. fastdist-lab check --backend nccl ${LAYOUT[*]}"
if timeout 300 "$PY" -m fastdist_lab check --backend nccl "${LAYOUT[@]}" --quiet --report "$OUT_DIR/check.json"; then
    echo "check: OK"
else
    fail "fastdist-lab check --backend nccl (exit $?)"
fi

if [ $((NGPU % 2)) -eq 0 ]; then  # EP 2 * ETP 1 divides a stage of tp * dp ranks
    step "1b. fastdist-lab check --backend nccl ${LAYOUT[*]} --ep 2 --etp 1: the expert groups, an all-to-all in each"
    if timeout 300 "$PY" -m fastdist_lab check --backend nccl "${LAYOUT[@]}" --ep 2 --etp 1 --quiet; then
        echo "check with experts: OK"
    else
        fail "fastdist-lab check --backend nccl --ep 2 --etp 1 (exit $?)"
    fi
fi

step "2. LocalCluster(backend='auto') on $NGPU GPU(s): devices, all-reduce on CUDA tensors, CUDA generators"
if ! timeout 300 "$PY" - "$NGPU" "$TP" "$PP" "$SDP" <<'EOF'
import sys

import torch

from fastdist_lab import Layout, LocalCluster
from fastdist_lab.seeds import generator_seeds

world, tp, pp, sdp = map(int, sys.argv[1:5])
layout = Layout(world_size=world, local_world_size=world, tensor_parallel=tp, pipeline_parallel=pp,
                sequence_data_parallel=sdp)


def probe(ctx):
    import torch

    d = ctx.distributed
    value = torch.full((4,), float(ctx.rank + 1), device=ctx.device)
    if d.world_group is not None:
        d.world_group.allreduce([value]).wait()
    torch.cuda.synchronize()
    d.set_step(3, "training")
    draw = torch.rand(2, generator=d.tp_generator, device=ctx.device)
    expected = generator_seeds(ctx.config, 3, "training")
    return {
        "device": str(ctx.device),
        "current_device": torch.cuda.current_device(),
        "sum": float(value[0].item()),
        "generator_device": str(d.tp_generator.device),
        "seeds_ok": d.tp_generator.initial_seed() == expected["tp"] and d.pp_generator.initial_seed() == expected["pp"],
        "draw": [round(float(x), 6) for x in draw.cpu()],
    }


with LocalCluster(world, backend="auto", progress=False, timeout=240) as cluster:
    print(cluster)
    assert cluster.backend == "nccl" and cluster.device_type == "cuda", cluster
    verification = cluster.apply(layout)
    print(verification)
    assert verification.ok
    results = cluster.run(probe)
    print(results)
    results.raise_first()
    for rank, value in enumerate(results.values):
        assert value["device"] == f"cuda:{rank}" and value["current_device"] == rank, value
        assert value["sum"] == world * (world + 1) / 2, value
        assert value["generator_device"].startswith("cuda") and value["seeds_ok"], value
    print("controller initialised CUDA:", torch.cuda.is_initialized())
print("LocalCluster on NCCL: OK")
EOF
then
    fail "LocalCluster on NCCL"
fi

step "3. torchrun --standalone --nproc-per-node $NGPU -m fastdist_lab.worker --backend nccl"
if timeout 300 "$PY" -m torch.distributed.run --standalone --nproc-per-node "$NGPU" -m fastdist_lab.worker \
        "${LAYOUT[@]}" --backend nccl --report "$OUT_DIR/torchrun.json" \
    && "$PY" -c 'import sys, fastdist_lab as fl; v = fl.load_report(sys.argv[1]); print(v.summary()); sys.exit(0 if v.ok else 1)' \
        "$OUT_DIR/torchrun.json"; then
    echo "torchrun: OK"
else
    fail "torchrun path on NCCL"
fi

step "4. NCCL with more ranks than GPUs must be refused with one line"
MESSAGE=$(timeout 120 "$PY" -m fastdist_lab check --backend nccl --world-size $((NGPU * 2)) --tp 1 --pp 1 --sdp 1 \
    --quiet 2>&1 >/dev/null)
CODE=$?
echo "exit $CODE: $MESSAGE"
if [ "$CODE" -ne 2 ] || ! grep -q "NCCL needs one GPU per rank: $((NGPU * 2)) ranks" <<<"$MESSAGE"; then
    fail "oversubscribed NCCL was not refused clearly"
fi

step "5. fastdist-lab train-step --backend nccl ${LAYOUT[*]}: one training step against one process"
for schedule in 1f1b interleaved-1f1b; do
    if timeout 600 "$PY" -m fastdist_lab train-step --backend nccl "${LAYOUT[@]}" --schedule "$schedule" --quiet; then
        echo "train-step ($schedule): OK"
    else
        fail "train-step --backend nccl --schedule $schedule (exit $?)"
    fi
done
if timeout 600 "$PY" -m fastdist_lab train-step --backend nccl "${LAYOUT[@]}" --dropout 0.1 --quiet; then
    echo "train-step with dropout (CUDA generators): OK"
else
    fail "train-step --backend nccl --dropout 0.1 (exit $?)"
fi

step "summary"
if [ "$failures" -eq 0 ]; then
    echo "GPU check passed ($NGPU GPU(s))"
else
    echo "GPU check: $failures step(s) failed"
fi
exit $((failures > 0))
