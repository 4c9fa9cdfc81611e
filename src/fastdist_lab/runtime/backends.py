"""Which backend a cluster of this machine can run: NCCL needs one GPU per local rank, gloo runs anywhere."""

from __future__ import annotations

import torch
import torch.distributed

from ..config import DistributedBackend
from ..errors import BackendUnavailable, LayoutError


def _gpus(n: int) -> str:
    return f"{n} GPU{'' if n == 1 else 's'}"


def check_nccl(local_world_size: int) -> None:
    """Raise ``BackendUnavailable`` unless NCCL can give one GPU to each of ``local_world_size`` ranks here."""
    if not hasattr(torch.distributed, "ProcessGroupNCCL") or not torch.cuda.is_available():
        build = torch.__version__
        what = "has no CUDA/NCCL support" if torch.version.cuda is None else "sees no CUDA device"
        raise BackendUnavailable(
            f"NCCL needs one GPU per rank, but this torch ({build}) {what}; use the gloo backend", "nccl"
        )
    visible = torch.cuda.device_count()
    if not 1 <= local_world_size <= visible:
        raise BackendUnavailable(
            f"NCCL needs one GPU per rank: {local_world_size} ranks per node, {_gpus(visible)} visible; "
            "use the gloo backend",
            "nccl",
        )


def resolve_backend(backend: str | DistributedBackend, local_world_size: int) -> str:
    """The backend ``backend`` stands for here: ``"auto"`` is ``"nccl"`` when every local rank gets a GPU (and NCCL
    is built in), else ``"gloo"``; ``"nccl"`` is checked the same way (``BackendUnavailable`` when it cannot run)."""
    name = str(getattr(backend, "value", backend)).strip().lower()
    if name not in ("auto", "gloo", "nccl"):
        raise LayoutError(f"backend={backend!r} is not a backend; use 'auto', 'gloo' or 'nccl'")
    if name == "gloo":
        return "gloo"
    if name == "nccl":
        check_nccl(local_world_size)
        return "nccl"
    try:
        check_nccl(local_world_size)
    except BackendUnavailable:
        return "gloo"
    return "nccl"
