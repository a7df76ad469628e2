"""Katib's search space (`spec.parameters` of a `kubeflow.org/v1beta1` Experiment) and the two
algorithms whose trials are fixed before the first one runs (issue 41): the values each trial
gets, the same for the same experiment.

- `grid` (Katib's: optuna's GridSampler over Katib's combinations, `convert_to_combinations`):
  every combination of the parameters' values — int: min to max by step (default 1); double:
  min to max by step (required); categorical and discrete: the list. GridSampler takes an
  unvisited point at random for each trial; here a seeded shuffle of the grid fixes that
  order, and the trials are its first `maxTrialCount` points.
- `random` (Katib's: hyperopt's `rand.suggest`): each value drawn on its own — uniform, or
  log-uniform (`distribution: logUniform`), between min and max, on the step's multiples
  from min when a step is given, integers for an int; one of a list's items.

The seed is `algorithmSettings`' `random_state` (hyperopt's) or `seed` (optuna's), else one
derived from the experiment's name. Trial k's values depend on the seed and k alone, so a
larger `maxTrialCount` keeps the earlier trials as they were. Values are written as Katib
writes them into a trial: an int as digits, a double as its shortest decimal (on a step's
grid, with the step's decimals), a list item as given. Katib's `normal` and `logNormal`
distributions are unbounded (hyperopt draws outside min..max), so they are refused.
"""

from __future__ import annotations

import hashlib
import itertools
import math
import random
from decimal import ROUND_FLOOR, Decimal, InvalidOperation
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

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
        low, high, step = (_number(v, self.type) for v in (space.min, space.max, space.step))
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
        """The parameter's values on Katib's grid (`convert_to_combinations`)."""
        if self.space.list:
            return list(self.space.list)
        low, step, count = self._steps()
        if step is None:
            raise ValueError(f"{self.name}: a grid needs feasibleSpace.step for a double")
        return [self._text(low + i * step) for i in range(count)]

    def draw(self, rng: random.Random) -> str:
        """One value as hyperopt's random search draws it (with a step: one of the step's
        multiples from min, within min..max)."""
        if self.space.list:
            return rng.choice(self.space.list)
        low, step, count = self._steps()
        high = _number(self.space.max, self.type)
        assert low is not None and high is not None  # (the model's rules)
        if step is not None and not self.log:
            return self._text(low + rng.randrange(count) * step)
        if self.log:
            value = Decimal(math.exp(rng.uniform(math.log(low), math.log(high))))
        else:
            value = Decimal(rng.uniform(float(low), float(high)))
        if step is not None:
            index = min(int(((value - low) / step).to_integral_value(ROUND_FLOOR)), count - 1)
            value = low + index * step
        return self._text(min(max(value, low), high))

    def _steps(self) -> tuple[Decimal, Decimal | None, int]:
        """min, the step (an int's: 1 by default) and how many steps fit min..max."""
        low, high = _number(self.space.min, self.type), _number(self.space.max, self.type)
        step = _number(self.space.step, self.type) or (Decimal(1) if self.type == "int" else None)
        assert low is not None and high is not None
        count = 0 if step is None else int((high - low) / step) + 1
        if count > GRID_LIMIT:
            raise ValueError(f"{self.name}: more than {GRID_LIMIT:,} values from min to max")
        return low, step, count

    def _text(self, value: Decimal) -> str:
        """A value as a trial gets it: digits for an int; a double on a step with the
        decimals of its min and step (no binary noise), else its shortest decimal."""
        if self.type == "int":
            return str(int(value))
        if self.space.step is None:
            return repr(float(value))
        places = max(_places(self.space.step), _places(self.space.min))
        return f"{value:.{places}f}"


def grid_size(parameters: list[Parameter]) -> int:
    return math.prod(len(p.points()) for p in parameters)


def grid(parameters: list[Parameter], count: int, seed: int) -> list[dict[str, str]]:
    """The first `count` points of the grid, in the order the seed shuffles it to."""
    if grid_size(parameters) > GRID_LIMIT:
        raise ValueError(
            f"the grid has {grid_size(parameters):,} points (at most {GRID_LIMIT:,}): give "
            "larger steps, fewer values, or algorithmName: random"
        )
    names = [p.name for p in parameters]
    points = [
        dict(zip(names, values, strict=True))
        for values in itertools.product(*(p.points() for p in parameters))
    ]
    random.Random(seed).shuffle(points)
    return points[:count]


def random_search(parameters: list[Parameter], count: int, seed: int) -> list[dict[str, str]]:
    """`count` trials' values, trial k's drawn from a generator of the seed and k alone."""
    return [
        {p.name: p.draw(rng) for p in parameters}
        for rng in (random.Random(f"{seed}/{k}") for k in range(count))
    ]


def seed_of(settings: dict[str, str], algorithm: str, experiment: str) -> int:
    """The algorithm's seed: `random_state` (random) or `seed` (grid) as given, else one
    derived from the experiment's name."""
    key = "random_state" if algorithm == "random" else "seed"
    if key in settings:
        try:
            return int(settings[key])
        except ValueError:
            raise ValueError(
                f"algorithmSettings {key}: {settings[key]!r} is not an integer"
            ) from None
    return int.from_bytes(hashlib.sha256(experiment.encode()).digest()[:8], "big")


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


def _places(value: str | None) -> int:
    """How many decimals a number is written with."""
    exponent = Decimal(value or "0").normalize().as_tuple().exponent
    return max(0, -exponent) if isinstance(exponent, int) else 0
