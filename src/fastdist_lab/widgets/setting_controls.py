"""The panels' controls of a training set-up, generated from ``Training``'s declarations (``setup.TRAINING_SETTINGS``):
each field whose ``Setting`` names a control and the panel gets that control (a number box, a checkbox, a dropdown),
with its label, range or choices, and the CSS class ``fdl-<panel>-<css>`` the browser tests find it by. A field added
with a control appears in the panels without a line here."""

from __future__ import annotations

from typing import Any

import ipywidgets as widgets

from ..setup import TRAINING_SETTINGS, Setting, Training
from .panel_parts import number_box

INT_LIMIT = 1 << 20
"""The largest value a number box of an integer setting without a maximum takes."""

FLOAT_LIMIT = 64.0
"""The largest value a number box of a number setting takes (the expert load: busiest rank over the mean)."""


def panel_settings(panel: str) -> dict[str, Setting]:
    """The ``Training`` fields whose control ``panel`` (``"cost"``, ``"advisor"``, ``"train"``) shows."""
    return {name: spec for name, spec in TRAINING_SETTINGS.items() if spec.control and panel in spec.panels}


def _width(label: str) -> str:
    return f"{max(130, 7 * len(label) + 90)}px"


def make_control(name: str, spec: Setting, panel: str) -> Any:
    """The control of field ``name`` (its ``Setting``) in ``panel``, showing ``Training()``'s value."""
    value = getattr(Training(), name)
    css = f"fdl-{panel}-{spec.css}"
    tooltip = f"Training.{name}: {spec.help}"
    style = {"description_width": "initial"}
    if spec.control == "checkbox":
        control = widgets.Checkbox(value=value, description=spec.label, indent=False, tooltip=tooltip)
    elif spec.control == "dropdown":  # the choices, or (label, choice) pairs where the setting gives labels
        options = list(zip(spec.option_labels, spec.choices or ())) if spec.option_labels else list(spec.choices or ())
        control = widgets.Dropdown(options=options, value=value, style=style, description=spec.label, tooltip=tooltip)
    elif spec.control == "float":
        control = number_box(value, spec.label, _width(spec.label), kind=widgets.BoundedFloatText,
                             min=spec.minimum or 0.0, max=min(spec.maximum or FLOAT_LIMIT, FLOAT_LIMIT), step=0.05)
    else:  # an integer; 0 stands for None where the field may be None
        low = 0 if spec.kind == "optional int" else int(spec.minimum or 0)
        high = int(spec.maximum) if spec.maximum is not None else INT_LIMIT
        control = number_box(0 if value is None else value, spec.label, _width(spec.label), min=low, max=high)
    control.tooltip = tooltip
    return control.add_class(css)


def make_controls(panel: str) -> dict[str, Any]:
    """Every control ``panel`` shows (``panel_settings``), by field name."""
    return {name: make_control(name, spec, panel) for name, spec in panel_settings(panel).items()}


def control_value(name: str, control: Any) -> Any:
    """The field's value a control holds (a number box's 0 is ``None`` for a field that may be ``None``)."""
    value = control.value
    if TRAINING_SETTINGS[name].kind == "optional int" and TRAINING_SETTINGS[name].control == "int" and value == 0:
        return None
    return value


def set_control(name: str, control: Any, value: Any) -> None:
    """Show ``value`` of field ``name`` (``None`` as 0 in a number box)."""
    control.value = 0 if value is None and TRAINING_SETTINGS[name].control == "int" else value
