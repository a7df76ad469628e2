"""Katib's search space (`spec.parameters` of a `kubeflow.org/v1beta1` Experiment) and the two
algorithms whose trials are fixed before the first one runs (issues 41, 53): the values each
trial gets, the same for the same experiment.

- `grid` is Katib's own (its optuna service, kubeflow/katib 33c8ff4e5
  `pkg/suggestion/v1beta1/optuna`, optuna 3.3's `GridSampler`): every combination of the
  parameters' values (`convert_to_combinations`: an int from min to max by step, default 1; a
  double from min by step with `numpy.arange`, its floats as they are; a list as given), over
  the parameters in name order; trial k's point is drawn by `RandomState(random_state)` among
  those not given out yet, listed as GridSampler lists them when trial k is asked: after the
  trial `parallelTrialCount` before it has ended (Katib's order whenever each trial ends in
  turn). Without `random_state`, the seed comes from the experiment's name.
- `random` draws by the laws of Katib's hyperopt service (`rand.suggest`): uniform, or
  log-uniform (`distribution: logUniform`), between min and max; with a step (an int's is 1),
  quantized as hyperopt quantizes (`round(x / step) * step`, multiples of the step from 0).
  Where hyperopt's multiple falls outside min..max, the nearest multiple inside is given. The
  seed is `random_state`, else one derived from the experiment's name; trial k's values depend
  on the seed and k alone, so a larger `maxTrialCount` keeps the earlier trials.

Values are written as Katib's services write them into a trial: an int as digits, a double as
Python writes the float (`0.024999999999999998`, as numpy's arange gives it), a list item as
given. Katib's `normal` and `logNormal` distributions are unbounded (hyperopt draws outside
min..max), so they are refused.
"""

from __future__ import annotations

import bisect
import hashlib
import math
import random
from decimal import ROUND_CEILING, ROUND_FLOOR, Decimal, InvalidOperation
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from .learning import Dimension
from .numpy_legacy import RandomState, arange

GRID_LIMIT = 100_000  # points of a grid enumerated (Katib's optuna lists them all too)


class FeasibleSpace(BaseModel):
    """Katib's FeasibleSpace: strings, as its API has them."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)  # (as Go decodes it)

    min: str | None = None
    max: str | None = None
    step: str | None = None
    list: tuple[str, ...] | None = Field(None, strict=False)  # (a YAML list, of strings)
    distribution: Literal["uniform", "logUniform", "normal", "logNormal", "unknown"] | None = None

    @field_validator("min", "max", "step", mode="before")
    @classmethod
    def _text(cls, value: object) -> object:
        if isinstance(value, int | float) and not isinstance(value, bool):
            raise ValueError(f'Katib reads it as a string: write "{value}"')
        return value


class Parameter(BaseModel):
    """One parameter of the search space, held to Katib's webhook rules
    (`validateParameters`) and to what a value needs: numbers, min ≤ max, a positive step,
    a positive min for a log scale, a bounded distribution."""

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True, strict=True)

    name: str = Field(min_length=1)
    type: Literal["int", "double", "categorical", "discrete"] = Field(alias="parameterType")
    space: FeasibleSpace = Field(alias="feasibleSpace")

    @model_validator(mode="after")
    def _katib_rules(self) -> Parameter:
        space = self.space
        if space == FeasibleSpace():
            raise ValueError("feasibleSpace must be specified")
        if self.type in ("categorical", "discrete"):
            if space.min is not None or space.max is not None or space.step is not None:
                raise ValueError(f"feasibleSpace: min, max and step are not for a {self.type}")
            if not space.list:
                raise ValueError(f"feasibleSpace.list: give the {self.type} values")
            return self
        kind = "an int" if self.type == "int" else "a double"
        if space.list:
            raise ValueError(f"feasibleSpace.list is not for {kind}: give min and max")
        if space.min is None or space.max is None:
            raise ValueError(f"feasibleSpace: {kind} needs min and max")
        low, high = (_bound(v, self.type) for v in (space.min, space.max))
        step = _number(space.step, self.type)
        if low > high:
            raise ValueError(f"feasibleSpace: min {space.min} is above max {space.max}")
        if step is not None and step <= 0:
            raise ValueError(f"feasibleSpace.step {space.step} is not positive")
        if space.distribution in ("normal", "logNormal"):
            raise ValueError(
                f"feasibleSpace.distribution {space.distribution} draws outside min..max "
                "(hyperopt's is unbounded): use uniform or logUniform"
            )
        if space.distribution == "logUniform" and low <= 0:
            raise ValueError("feasibleSpace: a logUniform distribution needs a positive min")
        return self

    @property
    def log(self) -> bool:
        return self.space.distribution == "logUniform"

    def points(self) -> list[str]:
        """The parameter's values on Katib's grid (`convert_to_combinations`), as text."""
        if self.space.list:
            return list(self.space.list)
        low, high, step = self._bounds()
        if step is None:
            raise ValueError(f"{self.name}: a grid needs feasibleSpace.step for a double")
        _limit(self.name, (high - low) / step + 1)
        if self.type == "int":  # (exact, as Katib's `int(min)`, whatever their size)
            first, last = (int(_bound(v, "int")) for v in (self.space.min, self.space.max))
            by = int(_number(self.space.step, "int") or 1)  # (a step is positive: the rules)
            return [str(v) for v in range(first, last + 1, by)]
        values = arange(low, high + step, step)
        if values and values[-1] > high:  # (Katib drops arange's last value past max)
            values.pop()
        return [repr(v) for v in values]

    def draw(self, rng: random.Random) -> str:
        """One value as Katib's hyperopt service draws it: uniform or log-uniform between
        min and max, quantized to the step (an int's: 1) as hyperopt quantizes."""
        if self.space.list:
            return rng.choice(self.space.list)
        low, high, step = self._bounds()
        if self.log:
            value = math.exp(rng.uniform(math.log(low), math.log(high)))
        else:
            value = rng.uniform(low, high)
        # (without a step: within the bounds, as exp of a log can land a hair past one)
        value = self.quantized(value) if step is not None else min(max(value, low), high)
        return str(int(value)) if self.type == "int" else repr(value)

    def dimension(self) -> Dimension:
        """The parameter as Katib's optuna service makes it for its samplers
        (`_get_optuna_search_space`): an int between min and max (by its step; on a log scale
        from max(1, min), step 1), a double between min and max (by its step; on a log scale
        without one), a list's items."""
        space = self.space
        if space.list:
            return Dimension(self.name, "choice", choices=tuple(space.list))
        low, high = float(space.min or 0), float(space.max or 0)
        step = float(space.step) if space.step is not None else None
        if self.type == "int":
            if self.log:
                return Dimension(self.name, "int", max(1, int(low)), int(high), 1, log=True)
            return Dimension(self.name, "int", int(low), int(high), step)
        if self.log:
            return Dimension(self.name, "float", max(1e-10, low), high, log=True)
        return Dimension(self.name, "float", low, high, step)

    def quantized(self, value: float) -> float:
        """hyperopt's `quniform`/`qloguniform`: the step's multiple nearest `value` (from 0,
        halves to even, as `numpy.round`), else, where that falls outside min..max, the
        nearest multiple inside (and a multiple a float's hair past a bound: that bound)."""
        low, high, step = self._bounds()
        assert step is not None
        first, last = self._multiples()
        return min(max(min(max(round(value / step), first), last) * step, low), high)

    def _multiples(self) -> tuple[int, int]:
        """The first and last multiples of the step (as counts of it) within min..max."""
        low, high = _bound(self.space.min, self.type), _bound(self.space.max, self.type)
        step = _number(self.space.step, self.type) or Decimal(1)
        first = int((low / step).to_integral_value(ROUND_CEILING))
        last = int((high / step).to_integral_value(ROUND_FLOOR))
        if first > last:
            raise ValueError(
                f"{self.name}: no multiple of step {self.space.step} lies between min "
                f"{self.space.min} and max {self.space.max} (Katib's random search rounds to "
                "them, from 0): give a step that has one, or no step"
            )
        return first, last

    def _bounds(self) -> tuple[float, float, float | None]:
        """min, max and the step (an int's: 1 by default, as Katib reads it) as floats."""
        low, high = _bound(self.space.min, self.type), _bound(self.space.max, self.type)
        step = _number(self.space.step, self.type)
        if step is None and self.type == "int":
            step = Decimal(1)
        return float(low), float(high), None if step is None else float(step)


def grid_size(parameters: list[Parameter]) -> int:
    return math.prod(len(p.points()) for p in parameters)


def grid(
    parameters: list[Parameter], count: int, seed: int, parallel: int = 1
) -> list[dict[str, str]]:
    """The first `count` trials of Katib's grid: GridSampler's combinations over the
    parameters in name order, trial k's drawn among those not given out yet, listed as
    GridSampler lists them when k is asked after the trial `parallel` before it has ended."""
    ordered = sorted(parameters, key=lambda p: p.name)
    values = [p.points() for p in ordered]
    size = math.prod(len(v) for v in values)
    _limit("the grid", size)
    rng = RandomState(seed)
    given: list[int] = []
    taken: list[int] = []  # (the same, in ascending order)
    for k in range(min(count, size)):
        point = _next_point(rng, size, given, taken, max(0, k - parallel + 1))
        given.append(point)
        bisect.insort(taken, point)
    names = [p.name for p in ordered]
    return [dict(zip(names, _combination(values, g), strict=True)) for g in given]


def _next_point(rng: RandomState, size: int, given: list[int], taken: list[int], ended: int) -> int:
    """GridSampler's next grid id: `rng.choice(list(unvisited))`, its unvisited ids being
    `set(range(size)) - set(visited) - set(running)` in CPython's order. Where both of those
    differences copy the grid's table (each set much larger than what it takes away), the ids
    sit at their own slots: the list is ascending, and the draw picks its j-th id directly."""
    running = len(given) - ended  # (the trials given out that have not ended)
    if (size >> 2) > ended and ((size - ended) >> 2) > running:
        point = rng.bounded(size - len(given) - 1)
        for id_ in taken:  # (the j-th id not taken: count past each taken one below it)
            if id_ > point:
                break
            point += 1
        return point
    unvisited = list(set(range(size)) - set(given[:ended]) - set(given[ended:]))
    return rng.choice(unvisited)


def _combination(values: list[list[str]], index: int) -> list[str]:
    """The `index`-th of `itertools.product(*values)` (the last parameter changes fastest)."""
    picked = []
    for options in reversed(values):
        index, at = divmod(index, len(options))
        picked.append(options[at])
    return picked[::-1]


def random_search(parameters: list[Parameter], count: int, seed: int) -> list[dict[str, str]]:
    """`count` trials' values, trial k's drawn from a generator of the seed and k alone."""
    return [
        {p.name: p.draw(rng) for p in parameters}
        for rng in (random.Random(f"{seed}/{k}") for k in range(count))
    ]


def seed_of(settings: dict[str, str], experiment: str) -> int:
    """The algorithm's seed: `random_state` (checked by `settings.problem`), else one derived
    from the experiment's name."""
    if "random_state" in settings:
        return int(settings["random_state"])
    return int.from_bytes(hashlib.sha256(experiment.encode()).digest()[:4], "big")


def _limit(what: str, size: float) -> None:
    if size > GRID_LIMIT:
        raise ValueError(
            f"{what} has {math.ceil(size):,} points (at most {GRID_LIMIT:,}): give larger "
            "steps, fewer values, or algorithmName: random"
        )


def _bound(value: str | None, kind: str) -> Decimal:
    """A feasible space's min or max as a number (an int's or a double's: given, by the
    model's rules)."""
    number = _number(value, kind)
    assert number is not None
    return number


def _number(value: str | None, kind: str) -> Decimal | None:
    """A feasible space's bound or step as a number (an int's: a whole one)."""
    if value is None:
        return None
    try:
        number = Decimal(value.strip())
    except InvalidOperation:
        raise ValueError(f"{value!r} is not a number") from None
    if not number.is_finite() or (kind == "int" and number != number.to_integral_value()):
        raise ValueError(f"{value!r} is not {'a whole number' if kind == 'int' else 'finite'}")
    return number
