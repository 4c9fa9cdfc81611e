# A config registry in the shape of torchtitan's Python registries (torchtitan/models/*/config_registry.py, 2026):
# each function returns a whole trainer config. fastdist_lab does not run Python: it refuses this file in one line.
from torchtitan.config import ParallelismConfig
from torchtitan.trainer import Trainer


def deepseek_v3_16b() -> Trainer.Config:
    return Trainer.Config(
        parallelism=ParallelismConfig(expert_parallel_degree=8),
        # launched by: torchrun --nproc_per_node 8 -m torchtitan.train --module deepseek_v3 --config deepseek_v3_16b
        command="torchrun --nproc_per_node 8 -m torchtitan.train --parallelism.expert_parallel_degree 8",
    )


def deepseek_v3_671b() -> Trainer.Config:
    return Trainer.Config(parallelism=ParallelismConfig(expert_parallel_degree=2, pipeline_parallel_degree=8))
