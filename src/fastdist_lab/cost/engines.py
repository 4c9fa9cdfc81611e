"""The training engines the step-time model can price a run for: what each engine overlaps, how its pipeline engine
schedules and the constants it documents (issue 27, item 3).

``ENGINES`` holds their names as ``Training(engine=...)`` and the CLI spell them; ``DEFAULT_ENGINE`` is the one every
prediction used before engines were a setting, so a ``Training`` that does not name one is priced as before:

- ``megatron``: Megatron-LM / Megatron-Core (NVIDIA), the engine of the calibration runs;
- ``deepspeed``: DeepSpeed (Microsoft), ZeRO stages and its pipeline engine (Megatron-DeepSpeed);
- ``fsdp2``: torch's ``fully_shard`` (FSDP2) as torchtitan runs it, with ``torch.distributed.pipelining``.
"""

from __future__ import annotations

ENGINES: tuple[str, ...] = ("megatron", "deepspeed", "fsdp2")
"""The engines ``Training(engine=...)`` accepts."""

DEFAULT_ENGINE = "megatron"
"""The engine of a ``Training`` that names none: Megatron-LM / Megatron-Core."""
