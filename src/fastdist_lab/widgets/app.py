"""``lab()``: the advisor, layout, cluster, streams and cost panels linked in one widget."""

from __future__ import annotations

from typing import Any

import ipywidgets as widgets

from ..layout import Layout
from .advisor_panel import AdvisorPanel
from .cluster_panel import ClusterPanel
from .cost_panel import CostPanel
from .layout_panel import LayoutPanel
from .streams_panel import StreamsPanel


class Lab(widgets.VBox):
    """The panels stacked in one widget; ``layout_panel``, ``cluster_panel``, ``streams_panel``, ``cost_panel``,
    ``advisor_panel`` (folded away at the top: *Advisor*).

    Changing the layout updates the cluster panel (what Start / Apply use), the streams panel (the
    prediction) and the cost panel (the estimate); starting or stopping the cluster tells the streams and cost
    panels which cluster to draw and replay on; each verification (Start / Apply) puts every rank's verdict on the
    layout panel's grid; choosing a row of the advisor's search loads its layout into the layout panel and its
    training set-up into the cost panel and *Train step*, and *Train this row* trains it on the cluster.
    """

    def __init__(
        self,
        layout_panel: LayoutPanel,
        cluster_panel: ClusterPanel,
        streams_panel: StreamsPanel,
        cost_panel: CostPanel | None = None,
        advisor_panel: AdvisorPanel | None = None,
    ):
        children = []
        if advisor_panel is not None:
            children = [widgets.Accordion([advisor_panel.widget], titles=("Advisor: which layout should I run?",))]
            children[0].add_class("fdl-advisor")
        titled = (("Layout", layout_panel), ("Cluster (real process groups)", cluster_panel),
                  ("Generator streams", streams_panel), ("What a training step costs", cost_panel))  # fmt: skip
        for title, panel in titled:
            if panel is not None:  # the cost panel is optional
                children += [widgets.HTML(f"<h3 style='margin:0.6em 0 0.2em 0'>{title}</h3>"), panel.widget]
        super().__init__(children)
        self.add_class("fdl-lab")
        self.layout_panel = layout_panel
        self.cluster_panel = cluster_panel
        self.streams_panel = streams_panel
        self.cost_panel = cost_panel
        self.advisor_panel = advisor_panel
        if advisor_panel is not None:
            advisor_panel.drive(layout_panel, cost_panel, cluster_panel)
        cluster_panel.follow(layout=layout_panel)
        for panel in (streams_panel, cost_panel) if cost_panel is not None else (streams_panel,):
            panel.follow(layout=layout_panel, cluster=cluster_panel)
        cluster_panel.show_grid = False  # the verdicts go on the layout panel's grid, the one you point at
        cluster_panel.draw_verdicts()
        cluster_panel.observe(self._on_verification, names="last_verification")

    def _on_verification(self, change: dict) -> None:
        self.layout_panel.show_verification(change["new"], self.cluster_panel.verified_layout)

    def flush(self) -> None:
        """Draw every pending redraw now."""
        for panel in (self.layout_panel, self.streams_panel, self.cost_panel, self.advisor_panel):
            if panel is not None:  # the cost and advisor panels are optional
                panel.flush()

    def close(self) -> None:
        """Stop the cluster (if any) and close every widget."""
        self.cluster_panel.stop()
        super().close()

    def __repr__(self) -> str:
        return f"Lab({self.layout_panel!r}, {self.cluster_panel!r})"

    def _repr_mimebundle_(self, **kwargs: Any) -> Any:
        bundle = super()._repr_mimebundle_(**kwargs)
        if isinstance(bundle, dict):
            bundle["text/plain"] = repr(self)
        return bundle


def lab(
    world_size: int | Layout = 8,
    local_world_size: int | None = None,
    tensor_parallel: int = 2,
    pipeline_parallel: int = 2,
    sequence_data_parallel: int = 2,
    pipeline_first: bool = False,
    backend: str = "auto",
    timeout: float | None = None,
    mode: str = "processes",
) -> Lab:
    """The lab: an ``AdvisorPanel`` (folded), a ``LayoutPanel`` (default world 8 = tensor 2 x pipeline 2 x
    sequence-data 2 on one node), a ``ClusterPanel``, a ``StreamsPanel`` and a ``CostPanel``, linked, in one widget.
    No rank is started until Start is clicked, no search until the advisor is asked; in ``"processes"`` mode a worker
    server is started ahead (``LocalCluster.prewarm()``: torch imported, ready to fork ranks), so that Start only
    forks them.

    ``lab(layout)`` opens the lab on an existing ``Layout`` (its sizes, order and seed). ``mode`` is what the
    cluster panel starts (``"processes"``, ``"threads"`` or ``"fake"``; a world too big for processes gets
    ``"threads"`` proposed); ``timeout`` defaults to each mode's default (60 s for processes).
    """
    if isinstance(world_size, Layout):
        layout_panel = LayoutPanel.from_layout(world_size)
    else:
        layout_panel = LayoutPanel(
            world_size=world_size,
            local_world_size=local_world_size,
            tensor_parallel=tensor_parallel,
            pipeline_parallel=pipeline_parallel,
            sequence_data_parallel=sequence_data_parallel,
            pipeline_first=pipeline_first,
        )
    cluster_panel = ClusterPanel(layout_panel.layout, backend=backend, timeout=timeout, mode=mode)
    streams_panel = StreamsPanel(layout_panel.layout)
    app = Lab(layout_panel, cluster_panel, streams_panel, CostPanel(layout_panel.layout), AdvisorPanel())
    if mode == "processes":  # once the panels are built: the imports it starts in the background never delay them
        from ..runtime import prewarm  # no torch here: the server imports it, this process in the background

        prewarm()
    return app
