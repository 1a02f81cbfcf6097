"""How the objective's differences are written and judged: percentage points or units.

An accuracy (a metric named ``*accuracy``, values within [0, 1]) is written in percent and
its differences in percentage points (pp); its default threshold for "gains nothing more"
is 0.5 pp. Any other objective (a loss, an RMSE) is written in its own units, and the
default threshold is 0.5% of the spread of its values (5th to 95th percentile), so it
scales with what the sweep saw. `sign` turns both directions into "larger is better".
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

#: The default threshold of an accuracy: half a percentage point.
ACCURACY_MIN_GAIN = 0.005
#: The default threshold of any other objective, as a fraction of its 5-95% spread.
SPREAD_MIN_GAIN = 0.005


@dataclass(frozen=True)
class Scale:
    """The objective's metric, direction and units; `min_gain` in the objective's units."""

    metric: str
    direction: str
    fraction: bool
    min_gain: float

    @property
    def sign(self) -> float:
        """+1 to maximise, -1 to minimise: ``sign * objective`` is larger when better."""
        return 1.0 if self.direction == "maximize" else -1.0

    def value(self, x: float) -> str:
        """An objective value: ``97.41 %`` for an accuracy, else 4 significant digits."""
        return f"{100 * x:.2f} %" if self.fraction else f"{x:.4g}"

    def gain(self, x: float) -> str:
        """A signed difference: ``+0.2 pp`` or ``-0.0031``."""
        shown = round(100 * x, 1) if self.fraction else float(f"{x:.3g}")
        shown = shown or 0.0  # never "-0.0"
        return f"{shown:+.1f} pp" if self.fraction else f"{shown:+.3g}"

    def size(self, x: float) -> str:
        """An unsigned difference: ``0.4 pp`` or ``0.0031``."""
        return f"{100 * abs(x):.1f} pp" if self.fraction else f"{abs(x):.3g}"


def scale_of(
    metric: str, direction: str, objective: np.ndarray, min_gain: float | None = None
) -> Scale:
    """The scale of a sweep's objective; `min_gain` (objective units) overrides the default."""
    finite = objective[np.isfinite(objective)]
    fraction = (
        metric.endswith("accuracy")
        and finite.size > 0
        and float(finite.min()) >= 0.0
        and float(finite.max()) <= 1.0
    )
    if min_gain is None:
        if fraction:
            min_gain = ACCURACY_MIN_GAIN
        elif finite.size:
            low, high = np.percentile(finite, [5, 95])
            min_gain = SPREAD_MIN_GAIN * float(high - low)
        else:
            min_gain = 0.0
    direction = "minimize" if direction == "minimize" else "maximize"
    return Scale(metric, direction, bool(fraction), float(min_gain))
