"""Fast cell text: glyphs rasterised once by FreeType, then pasted with numpy into one alpha image.

Drawing thousands of small labels as matplotlib ``Text`` artists costs about a millisecond per line; pasting
cached glyph bitmaps costs microseconds. The result is drawn as a single image over the axes.
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np
from matplotlib import font_manager, ft2font


class GlyphAtlas:
    """The bitmaps of single characters of one font at one pixel size, rendered on first use."""

    def __init__(self, size_pt: float, dpi: float, family: str = "DejaVu Sans"):
        path = font_manager.findfont(font_manager.FontProperties(family=family))
        self._font = ft2font.FT2Font(path)
        self._font.set_size(size_pt, dpi)
        self._glyphs: dict[str, tuple[np.ndarray, int, int]] = {}
        self._bearings: dict[str, int] = {}
        self._words: dict[str, np.ndarray] = {}
        probe = [self.glyph(c) for c in "0123456789pdgb"]
        self.ascent = max(image.shape[0] - descent for image, descent, _ in probe)
        self.descent = max(descent for _, descent, _ in probe)
        self.line_height = self.ascent + self.descent + 1

    def glyph(self, char: str) -> tuple[np.ndarray, int, int]:
        """``(alpha bitmap, descent in pixels, advance in pixels)`` of ``char``."""
        cached = self._glyphs.get(char)
        if cached is None:
            font = self._font
            font.set_text(char, 0.0)
            font.draw_glyphs_to_bitmap(antialiased=True)
            image = np.asarray(font.get_image()).copy()
            descent = int(round(font.get_descent() / 64))
            metrics = font.load_char(ord(char))
            advance = int(round(metrics.horiAdvance / 64))
            self._bearings[char] = max(0, int(round(metrics.horiBearingX / 64)))  # the bitmap starts at the ink
            if char == " ":
                image = np.zeros((1, 1), dtype=np.uint8)
            cached = self._glyphs[char] = (image, descent, advance)
        return cached

    def width(self, line: str) -> int:
        """Width in pixels of ``line``."""
        return sum(self.glyph(c)[2] for c in line)

    def word(self, text: str) -> np.ndarray:
        """The alpha bitmap of ``text`` (no spaces) on one line box: ``line_height - 1`` rows, baseline at ``ascent``.

        Words are cached: cell labels repeat the same few words (``t0``, ``d3``, ``p1``...) over and over.
        """
        cached = self._words.get(text)
        if cached is None:
            width = max(1, self.width(text))
            cached = np.zeros((self.ascent + self.descent, width), dtype=np.uint8)
            x = 0
            for char in text:
                image, descent, advance = self.glyph(char)
                h, w = image.shape
                y0 = max(0, self.ascent + descent - h)
                x0 = x + self._bearings.get(char, 0)
                region = cached[y0 : y0 + h, x0 : x0 + w]
                np.maximum(region, image[: region.shape[0], : region.shape[1]], out=region)
                x += advance
            if len(self._words) > 50_000:
                self._words.clear()
            self._words[text] = cached
        return cached

    def stamp(self, canvas: np.ndarray, lines: list[str], cx: float, cy: float, align: str = "center") -> None:
        """Paste ``lines`` into the alpha ``canvas`` (rows top-down), the block centred vertically on ``cy``.

        ``align`` is ``"center"`` (lines centred on ``cx``), ``"right"`` (lines ending at ``cx``) or ``"left"``
        (lines starting at ``cx``).
        """
        height, width = canvas.shape
        space = self.glyph(" ")[2]
        top = int(round(cy - len(lines) * self.line_height / 2))
        for index, line in enumerate(lines):
            words = [self.word(w) for w in line.split(" ")]
            total = sum(w.shape[1] for w in words) + space * (len(words) - 1)
            x = int(round(cx - {"center": total / 2, "right": total, "left": 0}[align]))
            y0 = top + index * self.line_height
            for bitmap in words:
                h, w = bitmap.shape
                if 0 <= y0 and y0 + h <= height and 0 <= x and x + w <= width:
                    region = canvas[y0 : y0 + h, x : x + w]
                    np.maximum(region, bitmap, out=region)
                x += w + space


@lru_cache(maxsize=16)
def atlas(size_pt: float, dpi: float) -> GlyphAtlas:
    """The shared ``GlyphAtlas`` for a font size and resolution."""
    return GlyphAtlas(size_pt, dpi)


def text_image(alpha: np.ndarray, rgb: tuple[float, float, float]) -> np.ndarray:
    """An RGBA uint8 image of colour ``rgb`` (floats in [0, 1]) whose opacity is the uint8 ``alpha`` mask."""
    out = np.empty((*alpha.shape, 4), dtype=np.uint8)
    out[..., :3] = np.round(np.asarray(rgb) * 255).astype(np.uint8)
    out[..., 3] = alpha
    return out
