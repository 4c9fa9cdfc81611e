"""Pixel drawing on ``(height, width, 3)`` uint8 RGB arrays: text blending, cell outlines, frames, hatching.

The rank-grid pictures are composed pixel by pixel with numpy (fast, exact, no resampling) and only then wrapped
in a matplotlib ``Figure`` for whoever wants one.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

RGB = tuple[float, float, float]


def rgb8(color: RGB | Sequence[float]) -> np.ndarray:
    """A float RGB colour in [0, 1] as a uint8 triple."""
    return np.round(np.asarray(color, dtype=np.float64) * 255).astype(np.uint8)


def hex_rgb(code: str) -> RGB:
    """``"#rrggbb"`` as floats in [0, 1]."""
    return tuple(int(code[i : i + 2], 16) / 255 for i in (1, 3, 5))  # type: ignore[return-value]


def blend(image: np.ndarray, alpha: np.ndarray, color: RGB) -> None:
    """Paint ``color`` over the RGB uint8 ``image`` with the uint8 opacity ``alpha`` (same height and width).

    Only the inked pixels are touched (text covers a small part of a picture), so this stays cheap on large
    images; a contiguous ``image`` is updated through a flat view, anything else through its bounding box.
    """
    if not image.flags.c_contiguous:
        rows = np.flatnonzero(alpha.any(axis=1))
        if rows.size == 0:
            return
        cols = np.flatnonzero(alpha.any(axis=0))
        r0, r1, c0, c1 = rows[0], rows[-1] + 1, cols[0], cols[-1] + 1
        box = np.ascontiguousarray(image[r0:r1, c0:c1])
        blend(box, np.ascontiguousarray(alpha[r0:r1, c0:c1]), color)
        image[r0:r1, c0:c1] = box
        return
    flat_alpha = alpha.reshape(-1)
    index = np.flatnonzero(flat_alpha)
    if index.size == 0:
        return
    pixels = image.reshape(-1, 3)
    a = flat_alpha[index].astype(np.int32)[:, None]
    under = pixels[index].astype(np.int32)
    target = rgb8(color).astype(np.int32)
    pixels[index] = (under + ((target - under) * a + 127) // 255).astype(np.uint8)


def cell_edges(mask: np.ndarray) -> np.ndarray:
    """Unit segments ``(n, 2, 2)`` (x, y) along the border of the True cells of a ``rows x cols`` mask."""
    padded = np.pad(mask, 1)
    horizontal = padded[1:, 1:-1] != padded[:-1, 1:-1]  # (rows + 1, cols): edge at y = i
    vertical = padded[1:-1, 1:] != padded[1:-1, :-1]  # (rows, cols + 1): edge at x = j
    hi, hj = np.nonzero(horizontal)
    vi, vj = np.nonzero(vertical)
    h = np.stack([np.stack([hj, hi], 1), np.stack([hj + 1, hi], 1)], 1)
    v = np.stack([np.stack([vj, vi], 1), np.stack([vj, vi + 1], 1)], 1)
    return np.concatenate([h, v]).astype(float)


def outline_cells(
    image: np.ndarray,
    mask: np.ndarray,
    origin: tuple[int, int],
    cell: tuple[int, int],
    color: RGB,
    width: int,
) -> None:
    """Draw the border of the True cells of ``mask`` (rows x cols) as lines ``width`` pixels thick, centred on
    the cell boundaries; ``origin`` is the pixel (x, y) of cell (0, 0) and ``cell`` the (width, height) of a cell.
    """
    if not mask.any():
        return
    x0, y0 = origin
    cw, ch = cell
    before, after = width // 2, width - width // 2
    height, full_width = image.shape[:2]
    value = rgb8(color)
    # merge runs of unit segments along one line: a long edge is one slice assignment
    padded = np.pad(mask, 1)
    horizontal = padded[1:, 1:-1] != padded[:-1, 1:-1]
    vertical = (padded[1:-1, 1:] != padded[1:-1, :-1]).T
    for lines, is_horizontal in ((horizontal, True), (vertical, False)):
        for line in np.flatnonzero(lines.any(axis=1)):
            run = np.diff(np.concatenate([[0], lines[line].astype(np.int8), [0]]))
            for start, stop in zip(np.flatnonzero(run == 1), np.flatnonzero(run == -1)):
                if is_horizontal:
                    y = y0 + line * ch
                    ya, yb = y - before, y + after
                    xa, xb = x0 + start * cw - before, x0 + stop * cw + after
                else:
                    x = x0 + line * cw
                    xa, xb = x - before, x + after
                    ya, yb = y0 + start * ch - before, y0 + stop * ch + after
                image[max(0, ya) : min(height, yb), max(0, xa) : min(full_width, xb)] = value


def frame(image: np.ndarray, box: tuple[int, int, int, int], color: RGB, width: int) -> None:
    """A rectangle outline ``width`` pixels thick just inside ``box`` = (x0, y0, x1, y1), x1 and y1 exclusive."""
    x0, y0, x1, y1 = box
    value = rgb8(color)
    image[y0 : y0 + width, x0:x1] = value
    image[max(y0, y1 - width) : y1, x0:x1] = value
    image[y0:y1, x0 : x0 + width] = value
    image[y0:y1, max(x0, x1 - width) : x1] = value


def stripe_slots(height: int, width: int, period: int, slots: int) -> np.ndarray:
    """For a ``height x width`` cell: which of ``slots`` colours each pixel of diagonal stripes ``period`` wide has."""
    y, x = np.mgrid[0:height, 0:width]
    return ((x + y) // period) % slots


def png_bytes(pixels: np.ndarray, level: int = 1) -> bytes:
    """An RGB (or RGBA) uint8 array as PNG bytes: no filter, zlib ``level``, no metadata.

    Several times faster than a general encoder for these pictures (large flat areas compress well anyway).
    """
    import struct
    import zlib

    height, width, channels = pixels.shape
    if channels not in (3, 4) or pixels.dtype != np.uint8:
        raise ValueError(f"pixels of shape {pixels.shape} and dtype {pixels.dtype} are not RGB/RGBA uint8")
    raw = np.empty((height, width * channels + 1), dtype=np.uint8)
    raw[:, 0] = 0  # filter type "none" on every row
    raw[:, 1:] = pixels.reshape(height, width * channels)

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)

    header = struct.pack(">IIBBBBB", width, height, 8, 2 if channels == 3 else 6, 0, 0, 0)
    body = zlib.compress(raw.tobytes(), level)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", body) + chunk(b"IEND", b"")
