"""How objects of the lower layers look in a notebook: the pictures that core itself must not know about.

``Layout._repr_html_`` gives its summary tables only (core imports no matplotlib); ``layout_html`` adds the rank
grid. ``fastdist_lab/__init__.py`` registers ``layout_html`` with IPython's HTML formatter when the package is
imported inside a running IPython, importing this module on the first display only.
"""

from __future__ import annotations

import base64

from ..layout import Layout
from .layout_picture import grid_picture

PICTURE_LIMIT = 4096
"""Layouts up to this many ranks are shown with their rank grid; larger ones with their tables alone."""


def layout_html(layout: Layout) -> str:
    """The layout's summary tables and (up to ``PICTURE_LIMIT`` ranks) its rank grid as an inline PNG."""
    picture = ""
    if layout.world_size <= PICTURE_LIMIT:
        data = base64.b64encode(grid_picture(layout).png()).decode("ascii")
        picture = f"<div><img alt='rank grid' src='data:image/png;base64,{data}'/></div>"
    return (
        "<div class='fastdist-layout' style='display:flex;flex-wrap:wrap;gap:1.5em;align-items:flex-start'>"
        f"{layout.summary_html()}{picture}</div>"
    )
