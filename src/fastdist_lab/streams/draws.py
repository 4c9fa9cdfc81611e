"""The one draw both predictions and real workers make, and the stream identity of a (seed, device) pair.

A stream is what a torch generator produces after ``manual_seed(seed)`` on one device type: the same seed on
the same device type gives the same numbers (CPU and CUDA generators differ), so ``(device type, seed key)``
is the stream's identity, where the key is the part of the seed the device's generator uses: torch's CPU
generator (mt19937) keeps only the **low 32 bits** of its 64-bit seed (``manual_seed(s)`` and
``manual_seed(s + 2**32)`` give the same numbers), CUDA's Philox generator the whole seed.
The draws are ``torch.rand(draws, dtype=torch.float64)``: doubles, compared exactly.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    import torch

DRAW_FUNCTION = "torch.rand(draws, dtype=torch.float64, generator=g)"
"""The draw every prediction and every real worker makes, as text (shown in reports)."""


def device_type(device: Any) -> str:
    """The device type (``"cpu"``, ``"cuda"``, ...) of a ``torch.device``, a device string or a generator."""
    device = getattr(device, "device", device)
    device = getattr(device, "type", device)
    text = str(device)
    return text.split(":", 1)[0]


def draw_values(generator: torch.Generator, draws: int) -> np.ndarray:
    """The next ``draws`` values of ``generator`` (advancing it), as a float64 numpy array on the CPU."""
    import torch

    values = torch.rand(draws, dtype=torch.float64, generator=generator, device=generator.device)
    return values.cpu().numpy()


def check_draws(draws: object) -> int:
    """``draws`` as a positive int, else ``ValueError``."""
    if isinstance(draws, bool) or not hasattr(draws, "__index__"):
        raise ValueError(f"draws={draws!r} must be a positive integer")
    count = draws.__index__()  # type: ignore[union-attr]
    if count < 1:
        raise ValueError(f"draws={count} must be a positive integer")
    return count


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


CPU_SEED_MASK = np.uint64(0xFFFFFFFF)
"""The bits of a seed torch's CPU generator uses (its mt19937 is initialised from the low 32 bits only)."""


def stream_key(seeds: np.ndarray, device: str) -> np.ndarray:
    """The part of each uint64 seed that determines the stream on ``device`` (low 32 bits on the CPU)."""
    seeds = np.asarray(seeds, dtype=np.uint64)
    return seeds & CPU_SEED_MASK if device_type(device) == "cpu" else seeds


def stream_keys(seeds: np.ndarray, devices: tuple[str, ...]) -> np.ndarray:
    """``stream_key`` of every (rank, generator) cell of a (rank, generator) seed array, per generator's device."""
    keys = np.array(seeds, dtype=np.uint64, copy=True)
    for column, device in enumerate(devices):
        keys[:, column] = stream_key(keys[:, column], device)
    return keys


def stream_ids(seeds: np.ndarray, devices: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Number the distinct ``(device, key)`` pairs of two equal-shape arrays in order of first appearance.

    ``seeds`` is uint64 (stream keys, see ``stream_keys``), ``devices`` small integer codes. Returns
    ``(ids, first, count)``: ``ids`` has the input's shape (equal ids = same pair), ``first[i]`` is the flat
    index where stream ``i`` first appears, ``count[i]`` how many cells hold it.
    """
    flat_seeds = seeds.ravel()
    flat_devices = devices.ravel()
    if flat_seeds.size == 0:
        return np.zeros(seeds.shape, np.int64), np.zeros(0, np.int64), np.zeros(0, np.int64)
    order = np.lexsort((flat_seeds, flat_devices))
    sorted_seeds, sorted_devices = flat_seeds[order], flat_devices[order]
    new = np.ones(order.size, dtype=bool)
    new[1:] = (sorted_seeds[1:] != sorted_seeds[:-1]) | (sorted_devices[1:] != sorted_devices[:-1])
    provisional = np.cumsum(new) - 1
    # lexsort is stable: the first element of each run of equal keys is its smallest flat index.
    first = order[new]
    renumber = np.empty(first.size, dtype=np.int64)
    by_first = np.argsort(first, kind="stable")
    renumber[by_first] = np.arange(first.size, dtype=np.int64)
    ids = np.empty(order.size, dtype=np.int64)
    ids[order] = renumber[provisional]
    return ids.reshape(seeds.shape), first[by_first], np.bincount(ids, minlength=first.size)
