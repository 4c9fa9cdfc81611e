"""``LayoutPanel``: choose a layout with controls, see its rank grid (point at a cell to see that rank), ranks
table, groups and topology."""

from __future__ import annotations

import html
import time
from typing import Any

import ipywidgets as widgets
import numpy as np
import traitlets

from ..config import DIM_NAMES
from ..errors import LayoutError
from ..experts import EXPERT_DIM_NAMES
from ..formatting import members_text, plural
from ..layout import RANK_COLUMNS, Layout
from ..numbering import divisors
from ..validation import check_int
from ..viz import grid_picture, verdict_marks
from ..viz.layout_picture import check_ranks
from .config_box import ConfigBox, ConfigLoad
from .grid_view import GridView
from .panel_parts import TABLE_STYLE, Debouncer, FactorDropdown, Panel, error_html, html_table, number_box
from .rank_card import card_html, hover_text

MAX_WORLD_SIZE = 65536
"""The largest world the panel accepts."""

MAX_TABLE_RANKS = 4096
"""The ranks table lists at most this many ranks (one ``<tr>`` each)."""

MAX_GROUPS_SHOWN = 512
"""The groups tab lists at most this many groups."""

ETP_DEFAULT = "= tensor"
"""The expert-tensor control's label for "the tensor size" (``expert_tensor_parallel=None``, its value 0)."""

_CONTROLS = (
    "world_size", "local_world_size", "tensor_parallel", "pipeline_parallel", "sequence_data_parallel",
    "pipeline_first", "seed", "expert_parallel", "expert_tensor_parallel",
)  # fmt: skip
"""The Layout fields with a control (each an attribute of the panel of the same name)."""

_RANK_HEADERS = ("rank", "node", "local", "tensor", "data", "pipeline", "seq. data", "batch data")


def ranks_html(layout: Layout, limit: int = MAX_TABLE_RANKS) -> str:
    """The ranks table of ``layout`` as HTML: one ``<tr>`` per rank (the first ``limit`` ranks) in ``<tbody>``."""
    shown = min(layout.world_size, limit)
    c = layout.coordinates
    columns = [np.arange(shown)] + [c[name][:shown] for name in RANK_COLUMNS]
    rows = zip(*(col.tolist() for col in columns))
    table = html_table(_RANK_HEADERS, rows)
    if shown < layout.world_size:
        table += f"<p>first {shown} of {layout.world_size} ranks</p>"
    return TABLE_STYLE + table


def groups_html(layout: Layout, dim: str, limit: int = MAX_GROUPS_SHOWN) -> str:
    """The groups of ``dim`` as HTML: one row per group (the first ``limit``), members in group-rank order."""
    groups = layout.groups(dim)
    rows = ((index, len(members), members_text(members)) for index, members in enumerate(groups[:limit]))
    note = "" if groups.shape[0] <= limit else f"<p>first {limit} of {groups.shape[0]} groups</p>"
    title = f"<b>{html.escape(dim)}</b>: {plural(groups.shape[0], 'group')} of {plural(groups.shape[1], 'rank')}"
    return TABLE_STYLE + title + html_table(("group", "size", "members"), rows) + note


def topology_html(layout: Layout) -> str:
    """The topology table of ``layout`` (per dim: group size, groups, nodes spanned, intra-node) as HTML."""
    frame = layout.topology()
    rows = ((dim, *row) for dim, row in zip(frame.index, frame.itertuples(index=False, name=None)))
    return TABLE_STYLE + html_table(("dim", *frame.columns), rows)


class LayoutPanel(Panel):
    """Controls for a layout and its pictures, redrawn on every change.

    Controls (attributes): ``world_size``, ``local_world_size``, ``tensor_parallel``, ``pipeline_parallel``,
    ``sequence_data_parallel``, ``expert_parallel`` and ``expert_tensor_parallel`` (dropdowns of the values that can
    be valid; the expert-tensor one offers ``= tensor``, value 0, for ``None``), ``pipeline_first``, ``seed``,
    ``rank`` (highlighted rank, -1 for none) and ``dim`` (the dim the grid is coloured by: ``layout.group_dims``,
    the expert dims too when the layout has experts).
    ``layout`` is the current ``Layout`` (None while the combination is impossible) and ``error`` the
    message saying why (empty when valid). Tabs: Grid | Ranks table | Groups | Topology.

    Point at the grid: a click on a cell (or ``click(x, y)`` in picture pixels, ``select_rank(rank)``,
    ``panel.highlight = rank``) highlights that rank and its group and shows its card (coordinates, groups of every
    dim, seeds) beside the grid; big worlds show one cell per node, ``zoom_to`` / ``zoom_nodes`` zoom in.
    ``show_verification(verification)`` writes each rank's verdict on the grid (while the layout is the same).

    Paste a framework's config or launch line in the *paste a config* box (or call ``load_config(text)``): when
    a ``Layout`` reproduces it, the controls take it at once (``other_fields`` keeps the fields without a control,
    such as seed shifts); else the box says why and lists the framework's groups, and nothing changes.

    Inside a running kernel the pictures are redrawn ``debounce`` seconds after the last change; elsewhere
    (tests, scripts) at once. ``flush()`` draws a pending redraw now.
    """

    layout = traitlets.Instance(Layout, allow_none=True)
    error = traitlets.Unicode("")

    def __init__(
        self,
        world_size: int = 8,
        local_world_size: int | None = None,
        tensor_parallel: int = 2,
        pipeline_parallel: int = 2,
        sequence_data_parallel: int = 2,
        pipeline_first: bool = False,
        seed: int = 1234,
        dim: str = "tensor",
        rank: int = -1,
        debounce: float = 0.05,
        expert_parallel: int = 1,
        expert_tensor_parallel: int | None = None,
    ):
        super().__init__()
        self.widget.add_class("fdl-layout-panel")
        local = world_size if local_world_size is None else local_world_size
        self.world_size = number_box(world_size, "world size", "150px", "fdl-world-size", min=1, max=MAX_WORLD_SIZE)
        self.local_world_size = self._factor("GPUs per node", local, "fdl-local-world-size")
        self.tensor_parallel = self._factor("tensor", tensor_parallel, "fdl-tensor-parallel")
        self.pipeline_parallel = self._factor("pipeline", pipeline_parallel, "fdl-pipeline-parallel")
        self.sequence_data_parallel = self._factor(
            "sequence-data", sequence_data_parallel, "fdl-sequence-data-parallel"
        )
        self.expert_parallel = self._factor("expert", expert_parallel, "fdl-expert-parallel")
        etp = 0 if expert_tensor_parallel is None else expert_tensor_parallel
        self.expert_tensor_parallel = self._factor("expert tensor", etp, "fdl-expert-tensor-parallel", ETP_DEFAULT)
        self.pipeline_first = widgets.Checkbox(value=bool(pipeline_first), description="pipeline first", indent=False)
        self.seed = number_box(seed, "seed", "170px", "fdl-seed", widgets.IntText)
        self.dim = widgets.Dropdown(options=[*DIM_NAMES, *EXPERT_DIM_NAMES], value=dim, description="colour by",
                                    style={"description_width": "initial"}).add_class("fdl-dim")  # fmt: skip
        self.rank = number_box(rank, "highlight rank", "170px", "fdl-rank", min=-1, max=max(0, world_size - 1))
        self.pipeline_first.add_class("fdl-pipeline-first")

        self.message = widgets.HTML().add_class("fdl-error")
        self.summary = widgets.HTML().add_class("fdl-summary")
        self.view = GridView(self.select_rank, self.zoom_to, self._hover_text)
        self.picture = self.view.picture
        self.grid = self.view.box
        self.grid.add_class("fdl-grid")
        self.card = self.view.card
        self.ranks_table = widgets.HTML().add_class("fdl-ranks-table")
        self.groups_table = widgets.HTML().add_class("fdl-groups")
        self.topology_table = widgets.HTML().add_class("fdl-topology")
        scrolled = [widgets.Box([table], layout=widgets.Layout(max_height="520px", overflow="auto"))
                    for table in (self.ranks_table, self.groups_table)]  # fmt: skip
        self.tabs = widgets.Tab(children=[self.view.widget, *scrolled, self.topology_table],
                                titles=("Grid", "Ranks table", "Groups", "Topology"))  # fmt: skip
        factors = [self.world_size, self.local_world_size, self.tensor_parallel, self.pipeline_parallel,
                   self.sequence_data_parallel, self.expert_parallel, self.expert_tensor_parallel, self.pipeline_first]
        factors = widgets.HBox(factors, layout=widgets.Layout(flex_flow="row wrap", align_items="center"))
        view = widgets.HBox([self.dim, self.rank, self.seed], layout=widgets.Layout(flex_flow="row wrap"))
        self.config_box = ConfigBox(self)
        self.widget.children = [factors, view, self.config_box.widget, self.message, self.summary, self.tabs]

        self.other_fields: dict[str, Any] = {}
        """Layout fields without a control (seed shifts, ``sequence_tensor_parallel``, ...), set by ``load_config``."""
        self.renders = 0
        self.render_seconds = 0.0
        self.geometry = None
        self._zoom: tuple[int, int] | None = None
        self._verified: tuple[Layout, Any, Any] | None = None  # (layout, verification, marks)
        self._drawn: tuple[Any, ...] | None = None
        self._redraw = Debouncer(self._render, debounce)
        for name in _CONTROLS:
            getattr(self, name).observe(lambda _: None if self._busy else self._update(), names="value")
        for control in (self.dim, self.rank):
            control.observe(lambda _: None if self._busy else self._redraw.schedule(), names="value")
        self._update()
        self._redraw.flush()

    # ----------------------------------------------------------------- construction helpers
    @classmethod
    def from_layout(cls, layout: Layout, **options: Any) -> LayoutPanel:
        """A panel showing ``layout`` (its sizes, order and seed; its other fields, such as seed shifts, are kept
        in ``other_fields``); ``options`` as for the constructor."""
        panel = cls(**{name: getattr(layout, name) for name in _CONTROLS}, **options)
        controlled = set(panel.values()) | {"backend"}
        panel.other_fields = {k: v for k, v in layout.fields().items() if k not in controlled}
        panel._update()
        return panel

    def _factor(self, description: str, value: int, css: str, default_label: str = "") -> FactorDropdown:
        return FactorDropdown(
            default_label,
            options=[(default_label if value == 0 and default_label else str(value), value)],
            value=value,
            description=description,
            style={"description_width": "initial"},
            layout=widgets.Layout(width="auto"),
        ).add_class(css)

    # ----------------------------------------------------------------- public
    def __repr__(self) -> str:
        return f"LayoutPanel({self.layout!r})" if self.layout is not None else f"LayoutPanel(error={self.error!r})"

    @property
    def png(self) -> bytes:
        """The PNG bytes of the grid picture currently shown."""
        return bytes(self.picture.value)

    def values(self) -> dict[str, Any]:
        """The layout fields the controls hold now (possibly an impossible combination)."""
        values = {name: getattr(self, name).value for name in _CONTROLS}
        return {**values, "expert_tensor_parallel": values["expert_tensor_parallel"] or None}

    def set(self, **values: Any) -> None:
        """Set several controls at once (one recomputation, one redraw).

        Example: ``panel.set(world_size=16, tensor_parallel=4)``.
        """
        unknown = sorted(set(values) - set(self.values()) - {"dim", "rank"})
        if unknown:
            raise TypeError(f"LayoutPanel.set got unknown control(s) {', '.join(unknown)}")
        with self._quiet():
            if "world_size" in values:
                self.world_size.value = values["world_size"]
            tensor = values.get("tensor_parallel", self.tensor_parallel.value)
            if values.get("expert_tensor_parallel", 0) in (None, tensor):  # the same layout as "= tensor" (a loaded
                values = {**values, "expert_tensor_parallel": 0}  # config's resolved size): keep following tensor
            for name in ("local_world_size", "tensor_parallel", "pipeline_parallel", "sequence_data_parallel",
                         "expert_parallel", "expert_tensor_parallel", "pipeline_first", "seed", "dim"):  # fmt: skip
                if name in values:
                    getattr(self, name).value = values[name]
        self._update()
        if "rank" in values:
            self.rank.value = values["rank"]

    def load_config(self, text: str, *, framework: str | None = None, version: str | None = None) -> ConfigLoad:
        """Load a framework's config or command line (``fastdist_lab.conventions.load_config``) into the panel, as
        the *paste a config* box's *Load* does; returns what it did. Without a world size in ``text``, the
        panel's is used."""
        return self.config_box.load(text, framework=framework, version=version)

    def flush(self) -> None:
        """Draw a pending redraw now (pictures and tables match the controls afterwards)."""
        self._redraw.flush()

    @property
    def pending(self) -> bool:
        """Whether a redraw is scheduled and not drawn yet."""
        return self._redraw.pending

    # ----------------------------------------------------------------- pointing
    @property
    def highlight(self) -> int | None:
        """The highlighted rank (None for none); assigning one highlights it (the ``highlight rank`` box follows)."""
        return self.rank.value if self.rank.value >= 0 else None

    @highlight.setter
    def highlight(self, rank: int | None) -> None:
        if rank is None:
            self.rank.value = -1
            return
        world = self.layout.world_size if self.layout is not None else self.world_size.value
        self.rank.value = check_int("highlight", rank, minimum=0, maximum=world - 1)

    def select_rank(self, rank: int | None) -> None:
        """Highlight ``rank`` (None: nothing) and draw at once: the grid, the outline of its group, its card."""
        self.highlight = rank
        self.flush()

    def click(self, x: float, y: float) -> int | None:
        """A click at pixel (x, y) of the grid picture shown (what the browser sends); returns the rank selected."""
        return self.view.click(x, y)

    def hover(self, x: float | None, y: float | None) -> str:
        """The mouse at pixel (x, y) of the picture (None: gone): the hover line's text."""
        return self.view.hover_at(x, y)

    def _hover_text(self, ranks: range) -> str:
        return hover_text(self.layout, ranks, self.dim.value) if self.layout is not None else ""

    @property
    def zoom(self) -> tuple[int, int] | None:
        """The ranks (start, stop) the grid is zoomed to; None for the whole world."""
        return self._zoom

    def zoom_to(self, ranks: tuple[int, int] | None) -> None:
        """Show only ranks ``start .. stop - 1`` (one cell per rank when they are few); None: the whole world."""
        if ranks is not None and self.layout is not None:
            ranks = check_ranks(self.layout, ranks)
            ranks = None if ranks == (0, self.layout.world_size) else ranks
        self._zoom = ranks
        self._redraw.schedule()
        self.flush()

    def zoom_nodes(self, first: int, last: int) -> None:
        """Show only nodes ``first`` to ``last`` (inclusive)."""
        if self.layout is None:
            raise LayoutError("no valid layout to zoom into")
        local = self.layout.local_world_size
        self.zoom_to((first * local, (last + 1) * local))

    def show_verification(self, verification: Any, layout: Layout | None = None) -> None:
        """Write each rank's verdict from ``verification`` (of ``layout``, the current one by default) on the
        grid while that layout is shown; None removes them."""
        layout = layout if layout is not None else self.layout
        if verification is None or layout is None:
            self._verified = None
        else:
            self._verified = (layout, verification, verdict_marks(verification))
        self._redraw.schedule()
        self.flush()

    @property
    def verification(self) -> Any:
        """The verification whose verdicts the grid shows (None when none, or when the layout changed since)."""
        return self._verified[1] if self._verified is not None and self._verified[0] == self.layout else None

    # ----------------------------------------------------------------- reactions
    def _offer_options(self) -> None:
        world = self.world_size.value
        local = self.local_world_size.value
        tp, pp = self.tensor_parallel.value, self.pipeline_parallel.value
        self.local_world_size.offer(divisors(world))
        self.tensor_parallel.offer(divisors(local))
        self.pipeline_parallel.offer(divisors(world // tp if world % tp == 0 else world))
        model = tp * pp
        self.sequence_data_parallel.offer(divisors(world // model if world % model == 0 else world))
        stage = world // pp if world % pp == 0 else world  # the ranks of a pipeline stage hold the experts
        ep, etp = self.expert_parallel.value, self.expert_tensor_parallel.value or tp
        self.expert_parallel.offer(divisors(stage // etp if stage % etp == 0 else stage))
        self.expert_tensor_parallel.offer([0, *divisors(stage // ep if stage % ep == 0 else stage)])
        if self.rank.value > world - 1:
            self.rank.value = -1  # that rank is gone: no highlight rather than a clamped one
        self.rank.max = max(0, world - 1)

    def _update(self) -> None:
        """Recompute options, ``layout`` and ``error`` from the controls (synchronous), then ask for a redraw."""
        with self._quiet():
            self._offer_options()
        try:
            layout: Layout | None = Layout(**{**self.other_fields, "backend": "gloo", **self.values()})
            error = ""
        except LayoutError as exc:
            layout, error = None, str(exc)
        if layout is not None:
            if self.rank.value >= layout.world_size:
                self.rank.value = -1
            self._offer_dims(layout.group_dims)
            if self._zoom is not None and self._zoom[1] > layout.world_size:
                self._zoom = None
        self.message.value = error_html(error)
        self.error = error
        self.layout = layout
        self._redraw.schedule()

    def _offer_dims(self, dims: tuple[str, ...]) -> None:
        """Let the dim chooser offer ``dims`` (the expert dims only when the layout has experts), keeping its dim
        when it is still one of them, else colouring by tensor."""
        if tuple(self.dim.options) == dims:
            return
        current = self.dim.value
        with self._quiet():
            self.dim.options = list(dims)
            self.dim.value = current if current in dims else "tensor"

    def _render(self) -> None:
        """Draw the grid picture, the card and the tables of the current layout (nothing while invalid)."""
        layout = self.layout
        if layout is None:
            self.summary.value = "<i>no valid layout: the pictures below show the last valid one</i>"
            return
        dim = self.dim.value
        highlight = self.rank.value if 0 <= self.rank.value < layout.world_size else None
        verification = self.verification
        marks = self._verified[2] if verification is not None else None
        key = (layout, dim, highlight, self._zoom, marks)
        if key == self._drawn:
            return
        start = time.perf_counter()
        picture = grid_picture(layout, dim=dim, highlight=highlight, ranks=self._zoom, marks=marks)
        self.view.show(picture)
        self.view.set_world(layout, self._zoom)
        self.geometry = picture.geometry
        self.card.value = card_html(layout, highlight, dim, verification)
        if self._drawn is None or self._drawn[0] != layout:
            self.ranks_table.value = ranks_html(layout)
            self.topology_table.value = topology_html(layout)
        if self._drawn is None or self._drawn[:2] != (layout, dim):
            self.groups_table.value = groups_html(layout, dim)
        self.summary.value = html.escape(repr(layout))
        self._drawn = key
        self.renders += 1
        self.render_seconds = time.perf_counter() - start
