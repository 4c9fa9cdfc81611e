"""``StreamReport``: every rank's generator streams at one step and phase, predicted or drawn for real."""

from __future__ import annotations

import html
from typing import TYPE_CHECKING, Any

import numpy as np

from ..layout import RANK_COLUMNS
from ..painters import paint
from .draws import DRAW_FUNCTION
from .invariants import StreamCells, run_checks

if TYPE_CHECKING:
    import pandas as pd


class StreamReport(StreamCells):
    """Every rank's generator streams at one step and phase (``StreamCells``) with what to do with them: the
    invariant checks (``check``), tables, the comparison of real draws with the prediction, pictures.
    """

    def sharing(self, generator: str) -> list[tuple[int, ...]]:
        """The groups of ranks that share one stream of ``generator``, each sorted, sorted by first rank."""
        ids = self.stream_ids[:, self.generator_index(generator)]
        order = np.argsort(ids, kind="stable")
        cuts = np.flatnonzero(np.diff(ids[order])) + 1
        return sorted(tuple(part.tolist()) for part in np.split(order, cuts)) if order.size else []

    # ------------------------------------------------------------------ tables
    def to_frame(self) -> pd.DataFrame:
        """One row per (rank, generator): ``rank``, coordinates, ``generator``, ``seed``, ``device``, ``draws``,
        ``stream_id`` (and ``origin`` for real reports)."""
        import pandas as pd

        world, count = self.seeds.shape
        coords = self.layout.ranks
        frame = pd.DataFrame({"rank": np.repeat(np.arange(world, dtype=np.int64), count)})
        for column in RANK_COLUMNS:
            frame[column] = np.repeat(coords[column].to_numpy(), count)
        frame["generator"] = pd.Categorical(np.tile(np.array(self.generators), world), categories=self.generators)
        frame["seed"] = self.seeds.ravel()
        frame["device"] = np.tile(np.array(self.devices, dtype=object), world)
        frame["draws"] = list(map(tuple, self.values.reshape(world * count, self.draws).tolist()))
        frame["stream_id"] = self.stream_ids.ravel()
        if self.origins is not None:
            frame["origin"] = self.origins.ravel()
        return frame

    def check(self) -> pd.DataFrame:
        """The stream invariants as a table with columns ``check``, ``ok`` and ``detail`` (see ``checks``)."""
        import pandas as pd

        return pd.DataFrame(run_checks(self), columns=["check", "ok", "detail"])

    @property
    def ok(self) -> bool:
        """Whether every check passes."""
        return bool(self.check()["ok"].all())

    # ------------------------------------------------------------------ real against predicted
    def _mismatch(self, other: StreamReport) -> dict[str, np.ndarray]:
        if not isinstance(other, StreamReport):
            raise TypeError(f"can only compare with another StreamReport, not {type(other).__name__}")
        if self.seeds.shape != other.seeds.shape or self.generators != other.generators:
            raise ValueError(
                f"reports differ in shape: {self.seeds.shape[0]} ranks x {self.generators} against "
                f"{other.seeds.shape[0]} ranks x {other.generators}"
            )
        if self.draws != other.draws:
            raise ValueError(f"reports drew {self.draws} and {other.draws} values; draw as many to compare")
        device = np.broadcast_to(np.array(self.devices) != np.array(other.devices), self.seeds.shape)
        seed = self.seeds != other.seeds
        values = (self.values != other.values).any(axis=2)
        return {"device": device, "seed": seed, "draws": values}

    def matches(self, other: StreamReport) -> bool:
        """Whether ``other`` has the same seeds, devices and draws (exactly) in every cell, at the same step."""
        if (self.step, self.phase) != (other.step, other.phase):
            return False
        return not any(part.any() for part in self._mismatch(other).values())

    def compare(self, other: StreamReport) -> pd.DataFrame:
        """Every (rank, generator) side by side with ``other``: device, seed and draws of both, ``ok``, ``differs``."""
        import pandas as pd

        mismatch = self._mismatch(other)
        world, count = self.seeds.shape
        a, b = (self.source, other.source) if self.source != other.source else ("self", "other")
        differs = np.full(self.seeds.shape, "", dtype=object)
        for name in ("draws", "seed", "device"):
            part = mismatch[name]
            differs[part] = [f"{name}, {text}" if text else name for text in differs[part]]
        return pd.DataFrame(
            {
                "rank": np.repeat(np.arange(world, dtype=np.int64), count),
                "generator": np.tile(np.array(self.generators), world),
                f"device_{a}": np.tile(np.array(self.devices, dtype=object), world),
                f"device_{b}": np.tile(np.array(other.devices, dtype=object), world),
                f"seed_{a}": self.seeds.ravel(),
                f"seed_{b}": other.seeds.ravel(),
                f"draws_{a}": list(map(tuple, self.values.reshape(-1, self.draws).tolist())),
                f"draws_{b}": list(map(tuple, other.values.reshape(-1, other.draws).tolist())),
                "ok": ~(mismatch["device"] | mismatch["seed"] | mismatch["draws"]).ravel(),
                "differs": differs.ravel(),
            }
        )

    def diff(self, other: StreamReport) -> pd.DataFrame:
        """The rows of ``compare(other)`` that differ (empty when ``matches(other)`` at the same step/phase)."""
        frame = self.compare(other)
        return frame[~frame["ok"]].reset_index(drop=True)

    # ------------------------------------------------------------------ display
    def summary(self) -> dict[str, Any]:
        """Source, world size, step, phase, draws, devices and the number of distinct streams per generator."""
        ids = self.stream_ids
        return {
            "source": self.source,
            "world_size": self.seeds.shape[0],
            "step": self.step,
            "phase": self.phase.name,
            "draws": self.draws,
            "draw": DRAW_FUNCTION,
            "devices": dict(zip(self.generators, self.devices)),
            "streams": {g: int(np.unique(ids[:, i]).size) for i, g in enumerate(self.generators)},
            "distinct_streams": self.num_streams,
        }

    def __repr__(self) -> str:
        s = self.summary()
        streams = ", ".join(f"{g}={n}" for g, n in s["streams"].items())
        return (
            f"StreamReport({s['source']}, world_size={s['world_size']}, step={s['step']}, phase={s['phase']}, "
            f"draws={s['draws']}; streams per generator: {streams}; {s['distinct_streams']} distinct)"
        )

    def plot(self, generator: str | None = None, **options: Any) -> Any:
        """Every rank's stream of every generator (``fastdist_lab.viz.plot_streams``); with a ``generator``, which
        ranks share its streams (``fastdist_lab.viz.plot_sharing``). A matplotlib ``Figure``."""
        if generator is None:
            return paint("streams", self, **options)
        return paint("sharing", self, generator, **options)

    def _repr_html_(self) -> str:
        checks = self.check().to_html(index=False)
        return f"<div class='fastdist-streams'><b>{html.escape(repr(self))}</b><br><b>Checks</b>{checks}</div>"


def comparison_text(frame: pd.DataFrame, max_rows: int = 20) -> str:
    """A few lines for a terminal from ``compare_on_cluster``'s frame: the verdict, then the differing rows."""
    where = f"step {frame.attrs.get('step', '?')}, {frame.attrs.get('phase', '?')}"
    total, bad = len(frame), frame[~frame["ok"]]
    if bad.empty:
        return f"generator streams, real vs predicted ({where}): all {total} (rank, generator) streams match exactly"
    lines = [f"generator streams, real vs predicted ({where}): {len(bad)} of {total} (rank, generator) streams differ"]
    lines.append(bad.head(max_rows).to_string(index=False))
    if len(bad) > max_rows:
        lines.append(f"... ({len(bad) - max_rows} more)")
    return "\n".join(lines)
