"""The *paste a config* box of ``LayoutPanel``: a framework's config or launch line becomes the panel's layout.

The box reads what is pasted with ``fastdist_lab.conventions.load_config`` (a Fast-LLM YAML, a Megatron-LM
command line or launch script, a torchtitan TOML or launch line). When a ``Layout`` reproduces the config, the
panel's controls take it in one update (one redraw); when none does, the box says why and lists the framework's
own groups, and the panel keeps its layout; a malformed input is one error line naming the line or key. Either
the whole layout is applied or nothing is: the controls are never left half-changed.
"""

from __future__ import annotations

import html
from dataclasses import dataclass
from typing import Any

import ipywidgets as widgets

from ..conventions import TORCHTITAN_VERSIONS, LoadedConfig, load_config
from ..errors import WorldSizeNeeded
from ..formatting import members_text
from ..layout import Layout
from .panel_parts import TABLE_STYLE, error_html, html_table

CONFIG_BOX_TITLE = "Paste a config or a command line"
"""The title of the (collapsed) box."""

PLACEHOLDER = (
    "A Fast-LLM YAML (model: distributed: ...), a Megatron-LM launch line "
    "(torchrun --nnodes 2 --nproc-per-node 8 pretrain_gpt.py --tensor-model-parallel-size 4 ...), "
    "a torchtitan launch line (NGPU=8 ./run_train.sh --parallelism.tensor_parallel_degree 2 ...) or TOML "
    "([parallelism] ...), or a path to such a file"
)
"""What the empty text area suggests."""

AUTO_VERSION = "auto"
"""The version choice that lets ``load_config`` pick torchtitan's vintage (from the command line, else its default)."""

MAX_GROUP_TABLE_WORLD = 65536
"""The framework's groups are listed for worlds up to this many ranks (they are built in full)."""


@dataclass(frozen=True)
class ConfigLoad:
    """What ``LayoutPanel.load_config`` did.

    ``status`` is ``"applied"`` (the panel now shows ``layout``), ``"no layout"`` (the config was read, no
    ``Layout`` reproduces it, the panel kept its layout) or ``"error"`` (nothing read or nothing applied:
    ``error`` is the one line saying why). ``loaded`` is what ``load_config`` read (None on a malformed input),
    ``message`` what the box shows, ``world_from_panel`` whether the world size came from the panel because the
    config gives none.
    """

    status: str
    message: str
    loaded: LoadedConfig | None = None
    layout: Layout | None = None
    error: str = ""
    world_from_panel: bool = False

    @property
    def applied(self) -> bool:
        """Whether the panel's controls now hold the loaded layout."""
        return self.status == "applied"

    def __repr__(self) -> str:
        if self.status == "applied":
            return f"ConfigLoad(applied: {self.layout!r})"
        if self.status == "no layout":
            return f"ConfigLoad(no layout: {self.loaded.reason if self.loaded else ''})"
        return f"ConfigLoad(error: {self.error})"


def one_line(error: BaseException) -> str:
    """The message of ``error`` on one line (its lines joined), never a traceback."""
    text = " ".join(part.strip() for part in str(error).splitlines() if part.strip())
    return text or type(error).__name__


def groups_table_html(loaded: LoadedConfig, first: int = 2) -> str:
    """The framework's groups of ``loaded`` as a compact HTML table: one row per group name (how many groups, of
    how many ranks, the first ``first`` groups' members)."""
    world = loaded.convention.world_size
    if world > MAX_GROUP_TABLE_WORLD:
        return f"<i>{world:,} ranks: too many to list the framework's groups here (see load_config)</i>"
    rows = []
    for name, groups in loaded.named_groups().items():
        shown = " | ".join(members_text(group) for group in groups[:first])
        more = f" | ... ({groups.shape[0] - first} more)" if groups.shape[0] > first else ""
        rows.append((name, groups.shape[0], groups.shape[1], shown + more))
    title = f"<b>{html.escape(loaded.framework)}'s groups</b> (world {world})"
    return TABLE_STYLE + title + html_table(("group", "groups", "ranks each", "first groups"), rows)


class ConfigBox:
    """The collapsible box of a ``LayoutPanel``: a text area, *Load*, a torchtitan version choice, what was read.

    ``panel`` is the panel it feeds (duck-typed: ``values()``, ``set(**values)``, ``other_fields``, ``layout``,
    ``world_size.max``). ``load(text)`` is what *Load* does, and returns a ``ConfigLoad``.
    """

    def __init__(self, panel: Any):
        self.panel = panel
        self.text = widgets.Textarea(placeholder=PLACEHOLDER, rows=5, layout=widgets.Layout(width="100%"))
        self.text.add_class("fdl-config-text")
        self.version = widgets.Dropdown(
            options=[AUTO_VERSION, *TORCHTITAN_VERSIONS],
            value=AUTO_VERSION,
            description="torchtitan version",
            style={"description_width": "initial"},
            layout=widgets.Layout(width="auto"),
        ).add_class("fdl-config-version")
        self.load_button = widgets.Button(description="Load", icon="upload", button_style="primary")
        self.load_button.add_class("fdl-config-load")
        self.status = widgets.HTML().add_class("fdl-config-status")
        self.groups = widgets.HTML().add_class("fdl-config-groups")
        body = widgets.VBox(
            [self.text, widgets.HBox([self.load_button, self.version]), self.status, self.groups],
            layout=widgets.Layout(width="100%"),
        )
        self.widget = widgets.Accordion(children=[body], titles=(CONFIG_BOX_TITLE,), selected_index=None)
        self.widget.add_class("fdl-config-box")
        self.last: ConfigLoad | None = None
        self.load_button.on_click(lambda _button: self.load())

    # ------------------------------------------------------------------ loading
    def load(self, text: str | None = None, *, framework: str | None = None, version: str | None = None) -> ConfigLoad:
        """Read ``text`` (the text area's when None; shown in it otherwise) and apply it to the panel when a
        ``Layout`` reproduces it. ``version``: torchtitan's vintage (the box's choice when None)."""
        if text is None:
            text = self.text.value
        else:
            self.text.value = text
        if version is None and self.version.value != AUTO_VERSION:
            version = self.version.value
        result = self._read_and_apply(text, framework, version)
        self._show(result)
        self.last = result
        return result

    def _read_and_apply(self, text: str, framework: str | None, version: str | None) -> ConfigLoad:
        if not text.strip():
            return ConfigLoad("error", "", error="nothing to load: paste a config or a command line first")
        world_from_panel, world, local = False, 0, 0
        try:
            try:
                loaded = load_config(text, framework=framework, version=version)
            except WorldSizeNeeded:
                world, local = self._panel_world()
                loaded = load_config(
                    text, world_size=world, local_world_size=local, framework=framework, version=version
                )
                world_from_panel = True
        except ValueError as error:  # LayoutError and ConventionError name the line, key or rule at fault
            why = f" (the config gives no world size: the panel's {world} was used)" if world else ""
            return ConfigLoad("error", "", error=one_line(error) + why)
        message = loaded.description
        if world_from_panel:
            message += f"\nThe config gives no world size: world size {world} ({local} per node) from the panel."
        if loaded.layout is None:
            message += "\nThe panel keeps its layout; the framework's groups are below."
            return ConfigLoad("no layout", message, loaded, world_from_panel=world_from_panel)
        limit = self.panel.world_size.max
        if loaded.layout.world_size > limit:
            error = (
                f"world size {loaded.layout.world_size:,} is more than the panel shows (at most {limit:,}); "
                f"nothing changed ({loaded.layout!r})"
            )
            return ConfigLoad("error", message, loaded, error=error, world_from_panel=world_from_panel)
        try:
            layout = self._apply(loaded.layout)
        except Exception as error:  # the panel is restored: say why rather than raise inside a button callback
            reason = f"could not apply {loaded.layout!r}: {one_line(error)}; the panel is as it was"
            return ConfigLoad("error", message, loaded, error=reason, world_from_panel=world_from_panel)
        extra = other_fields_note(self.panel.other_fields)
        if extra:
            message += f"\n{extra}"
        return ConfigLoad("applied", message, loaded, layout, world_from_panel=world_from_panel)

    def _panel_world(self) -> tuple[int, int]:
        layout = self.panel.layout
        if layout is not None:
            return layout.world_size, layout.local_world_size
        values = self.panel.values()
        return values["world_size"], values["local_world_size"]

    def _apply(self, layout: Layout) -> Layout | None:
        """Set the panel's controls and other fields to ``layout`` at once; on any failure restore both."""
        fields = layout.fields()
        controls = {name: fields[name] for name in self.panel.values()}
        others = {name: value for name, value in fields.items() if name not in controls and name != "backend"}
        saved_values, saved_others = self.panel.values(), dict(self.panel.other_fields)
        try:
            self.panel.other_fields = others
            self.panel.set(**controls)
        except Exception:
            self.panel.other_fields = saved_others
            self.panel.set(**saved_values)
            raise
        return self.panel.layout

    # ------------------------------------------------------------------ showing
    def _show(self, result: ConfigLoad) -> None:
        style = "white-space:pre-wrap;font-family:var(--jp-code-font-family,monospace);font-size:12px;line-height:1.4"
        error = f"<div class='fdl-config-error' style='line-height:1.4'>{error_html(result.error)}</div>"
        message = f"<div class='fdl-config-message' style='{style}'>{html.escape(result.message)}</div>"
        self.status.value = (error if result.error else "") + (message if result.message else "")
        self.groups.value = (
            groups_table_html(result.loaded) if result.status == "no layout" and result.loaded is not None else ""
        )


def other_fields_note(fields: dict[str, Any]) -> str:
    """The ``Layout`` fields in ``fields`` (those the panel has no control for) that differ from the defaults,
    in words ("" when none)."""
    defaults = Layout(world_size=1, local_world_size=1).fields()
    changed = [f"{name}={value}" for name, value in fields.items() if value != defaults.get(name)]
    return "Also from the config (no control in the panel): " + ", ".join(changed) if changed else ""
