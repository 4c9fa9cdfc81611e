"""How a field of a training set-up is stated, checked, shown and searched, declared once beside the field.

Each field of ``Training`` is declared with ``setting(default, ...)``: a dataclass field whose metadata holds its
``Setting`` (its command-line flag and aliases, its help, its kind and range or choices, the values the search tries
and the kind of control a panel shows). Everything that parses, checks, shows or searches a field reads it from there
(``settings_of``): ``Training``'s own checks (``Setting.check``), the flags of ``fastdist-lab cost``, ``search`` and
``train-step`` (``commands/flags.py``), the panels' controls (``widgets/setting_controls.py``), and the search's limits
and its rows as a ``Training`` (``cost/search``). Adding a field is one declaration plus its formula; a field's check
cannot be forgotten. (torchtitan's ``JobConfig`` does the same for its settings: ``config/job_config.py``.)
"""

from __future__ import annotations

import dataclasses
import itertools
import math
import numbers
from dataclasses import dataclass
from typing import Any

from ..errors import CostError
from ..formatting import quoted
from ..validation import check_choice, check_flag, check_int, is_bool

KINDS: tuple[str, ...] = ("int", "optional int", "flag", "choice", "number", "counts")
"""What a setting holds: an integer, an integer or ``None``, ``True`` / ``False``, one of ``choices``, a finite number,
or a sequence of integers (``counts``: e.g. layers per pipeline stage)."""

SEARCH_ROLES: tuple[str | None, ...] = ("varied", "fixed", None)
"""How ``search`` treats a setting: ``"varied"``, a column of its frame (it tries ``Setting.tried``, or the values it is
given, row by row); ``"fixed"``, one value for every row (its default unless given); ``None``, not a search limit (the
search decides it, e.g. the micro-batches, or never varies it)."""

MAX_COUNTS = 2**14
"""The most entries (and the largest entry) of a ``counts`` setting without a ``maximum`` of its own."""
CONTROLS: tuple[str | None, ...] = ("int", "float", "checkbox", "dropdown", None)
"""The control a panel shows for a setting (``None``: none; the value comes from a loaded set-up)."""


@dataclass(frozen=True)
class Setting:
    """How one field is stated, checked, shown and searched.

    - ``flag`` (``"--micro-batch-size"``) and ``aliases``: its spelling on the command line; a ``flag`` setting whose
      default is ``True`` is turned off by ``--no-...`` (``cli_flag``). ``help``: what it is, in a few words.
    - ``kind`` (``KINDS``), ``minimum`` / ``maximum`` (the range of a number or integer, both included), ``choices``
      (of a ``"choice"``), ``meaning`` (what the value measures, said in its error), ``none_means`` (what ``None``
      stands for in an ``"optional int"``, e.g. ``"stages"``).
    - ``search`` (``SEARCH_ROLES``) and ``tried``: the values the search tries by default for a varied field.
    - ``control`` (``CONTROLS``), ``label`` (its description), ``css`` (the control's class: ``fdl-<panel>-<css>``),
      ``option_labels`` (a dropdown's labels for its ``choices``), ``panels`` (the panels that show it: ``"cost"``,
      ``"advisor"``, ``"train"``).
    - ``excludes``: a field whose flag a command line may not give with this one (they state the same thing);
      ``cli_choices``: the command line itself refuses a value not among ``choices`` (else ``Training`` does, in its
      one line naming the field).
    """

    flag: str
    help: str
    kind: str
    aliases: tuple[str, ...] = ()
    minimum: float | None = None
    maximum: float | None = None
    choices: tuple[Any, ...] | None = None
    meaning: str = ""
    none_means: str = ""
    search: str | None = "fixed"
    tried: tuple[Any, ...] | None = None
    control: str | None = None
    label: str = ""
    css: str = ""
    option_labels: tuple[str, ...] | None = None
    panels: tuple[str, ...] = ("cost",)
    excludes: str = ""
    cli_choices: bool = False

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"Setting kind={self.kind!r} must be one of {', '.join(map(repr, KINDS))}")
        if self.search not in SEARCH_ROLES or self.control not in CONTROLS:
            raise ValueError(f"Setting search={self.search!r} / control={self.control!r} is not one of the roles")
        if self.kind == "choice" and not self.choices:
            raise ValueError(f"Setting {self.flag}: a choice needs its choices")

    def check(self, name: str, value: Any, error: type[Exception] = CostError) -> Any:
        """``value`` normalised (an ``int``, a ``bool``, a ``float``, a tuple of ints) or ``error`` naming ``name``
        and the value: its kind, its range, its choices."""
        low = None if self.minimum is None else int(self.minimum)
        high = None if self.maximum is None else int(self.maximum)
        if self.kind == "int" or (self.kind == "optional int" and value is not None):
            return check_int(name, value, minimum=low, maximum=high, error=error)
        if self.kind == "optional int":
            return None
        if self.kind == "flag":
            return check_flag(name, value, error=error)
        if self.kind == "choice":
            return check_choice(name, value, self.choices or (), error=error)
        if self.kind == "number":
            return self._number(name, value, error)
        return self._counts(name, value, error)

    def _number(self, name: str, value: Any, error: type[Exception]) -> float:
        low = -math.inf if self.minimum is None else self.minimum
        high = math.inf if self.maximum is None else self.maximum
        if is_bool(value) or not isinstance(value, numbers.Real) or not (low <= value <= high):
            range_ = f" >= {low:g}" if self.minimum is not None else " (finite)"
            if self.maximum is not None and isinstance(value, numbers.Real) and value > high:
                range_ = f" <= {high:g}"
            meaning = f" ({self.meaning})" if self.meaning else ""
            raise error(f"{name}={quoted(value)} must be a number{range_}{meaning}")
        return float(value)

    def _counts(self, name: str, value: Any, error: type[Exception]) -> tuple[int, ...] | None:
        if value is None:
            return None
        if isinstance(value, (str, bytes)) or not hasattr(value, "__iter__"):
            raise error(f"{name}={quoted(value)} must be a sequence of {self.meaning or 'counts'}")
        most = MAX_COUNTS if self.maximum is None else int(self.maximum)
        counts = tuple(itertools.islice(value, most + 1))  # an endless iterable ends here
        if len(counts) > most:
            raise error(f"{name}={quoted(counts)} must hold at most {most} {self.meaning or 'counts'}")
        for count in counts:
            if is_bool(count) or not isinstance(count, numbers.Integral) or not (self.minimum or 0) <= count <= most:
                raise error(f"{name}={quoted(counts)} must hold integers from {self.minimum or 0:g} to {most}")
        return tuple(int(count) for count in counts)

    def cli_flag(self, default: Any) -> str:
        """The flag a command line sets it with: ``--no-<flag>`` for a ``flag`` that is on by default."""
        if self.kind == "flag" and default is True:
            return "--no-" + self.flag.removeprefix("--")
        return self.flag


def setting(default: Any, **declared: Any) -> Any:
    """A dataclass field with ``default`` whose metadata holds its ``Setting(**declared)``."""
    return dataclasses.field(default=default, metadata={"setting": Setting(**declared)})


def settings_of(cls: type) -> dict[str, Setting]:
    """Each field of the dataclass ``cls`` declared with ``setting`` -> its ``Setting``, in declaration order."""
    return {field.name: field.metadata["setting"] for field in dataclasses.fields(cls) if "setting" in field.metadata}


def defaults_of(cls: type) -> dict[str, Any]:
    """Each field of the dataclass ``cls`` declared with ``setting`` -> its default."""
    return {field.name: field.default for field in dataclasses.fields(cls) if "setting" in field.metadata}


def check_settings(instance: Any, error: type[Exception] = CostError) -> None:
    """Check every declared field of the frozen dataclass ``instance`` by its ``Setting`` (in declaration order) and
    store the value normalised."""
    for name, spec in settings_of(type(instance)).items():
        object.__setattr__(instance, name, spec.check(name, getattr(instance, name), error))
