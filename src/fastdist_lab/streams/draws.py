"""The one draw both predictions and real workers make: ``torch.rand(draws, dtype=torch.float64)``.

Doubles, compared exactly. Which seeds give the same stream is ``fastdist_lab.seeds.stream_key`` (torch's CPU
generator reads only the low 32 bits of a seed; ``manual_seed(s)`` and ``manual_seed(s + 2**32)`` give the same
numbers on the CPU).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from ..validation import check_int

if TYPE_CHECKING:
    import torch

DRAW_FUNCTION = "torch.rand(draws, dtype=torch.float64, generator=g)"
"""The draw every prediction and every real worker makes, as text (shown in reports)."""


def draw_values(generator: torch.Generator, draws: int) -> np.ndarray:
    """The next ``draws`` values of ``generator`` (advancing it), as a float64 numpy array on the CPU."""
    import torch

    values = torch.rand(draws, dtype=torch.float64, generator=generator, device=generator.device)
    return values.cpu().numpy()


def check_draws(draws: object) -> int:
    """``draws`` as a positive int, else ``ValueError``."""
    return check_int("draws", draws, minimum=1, error=ValueError)


def draw_seeds(seeds: np.ndarray, device: str, draws: int) -> np.ndarray:
    """The first ``draws`` values of a generator on ``device`` seeded with each of ``seeds``: shape (len, draws).

    One generator is re-seeded for every seed (``manual_seed`` resets it completely, so this equals a fresh
    generator per seed) and written straight into one output tensor.
    """
    import torch

    out = torch.empty((len(seeds), draws), dtype=torch.float64, device=device)
    generator = torch.Generator(device=device)
    for row, seed in enumerate(seeds.tolist()):
        generator.manual_seed(seed)
        torch.rand(draws, dtype=torch.float64, generator=generator, device=device, out=out[row])
    return out.cpu().numpy()


MT_MAX_DRAWS = 113
"""Most draws ``cpu_draws`` computes in closed form: 2 * draws words must come from the first, untangled part of
mt19937's first twist (624 - 397 = 227 words)."""


def cpu_draws(seeds: np.ndarray, draws: int) -> np.ndarray:
    """``draw_seeds(seeds, "cpu", draws)`` for every seed at once, vectorised with numpy (no torch call).

    torch's CPU generator is an mt19937 initialised from the low 32 bits of the seed; a float64 ``rand`` value
    is ``(((u1 << 32) | u2) & (2**53 - 1)) / 2**53`` for two consecutive tempered outputs ``u1``, ``u2``.
    The first ``2 * draws`` outputs need only state words ``0 .. 2 draws`` and ``397 .. 397 + 2 draws`` of
    the initialised state, computed for all seeds together. ``predict`` checks a sample against torch and
    falls back to ``draw_seeds`` should they ever disagree.
    """
    if not 1 <= draws <= MT_MAX_DRAWS:
        raise ValueError(f"draws={draws} must be in [1, {MT_MAX_DRAWS}] for the closed form")
    words = 2 * draws
    u32 = np.uint32
    current = (np.asarray(seeds, dtype=np.uint64) & np.uint64(0xFFFFFFFF)).astype(u32)
    low = np.empty((words + 1, current.size), dtype=u32)
    high = np.empty((words, current.size), dtype=u32)
    low[0] = current
    for index in range(1, 397 + words):
        current = u32(1812433253) * (current ^ (current >> u32(30))) + u32(index)
        if index <= words:
            low[index] = current
        if index >= 397:
            high[index - 397] = current
    mixed = (low[:words] & u32(0x80000000)) | (low[1:] & u32(0x7FFFFFFF))
    out = high ^ (mixed >> u32(1)) ^ np.where(low[1:] & u32(1), u32(0x9908B0DF), u32(0))
    out ^= out >> u32(11)
    out ^= (out << u32(7)) & u32(0x9D2C5680)
    out ^= (out << u32(15)) & u32(0xEFC60000)
    out ^= out >> u32(18)
    joined = (out[0::2].astype(np.uint64) << np.uint64(32)) | out[1::2].astype(np.uint64)
    return ((joined & np.uint64(2**53 - 1)).astype(np.float64) * 2.0**-53).T.copy()
