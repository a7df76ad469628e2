"""Katib's `sobol` (its goptuna suggestion service: goptuna v0.8.0's Sobol sampler, which
Katib creates with the whole search space defined and no initial points skipped), so that a
sweep's trials are the ones Katib would run: trial k takes the (k+1)-th point of an
unscrambled Sobol sequence over the parameters that have more than one value, in name order,
each mapped as goptuna maps it and written as Katib writes it (`sampleNextParam`).

As goptuna's engine does: dimension 0 is the all-ones direction, dimension j ≥ 1 takes Joe &
Kuo's line D = j + 2 (goptuna indexes its table from D = 2 by j), 30 bits, Gray-code order, a
point is x / 2^32. As Katib's goptuna converter does: a double without step is uniform (its
`distribution` is not read), with a step discrete uniform; an int without step is uniform on
min..max−1 (goptuna's floor never reaches max), with a step on min + i·step below max; a
categorical or discrete one of its list. A parameter with one value takes it.
"""

from __future__ import annotations

import math
from decimal import Decimal

from .space import Parameter

MAX_BIT = 30
MASK = 0xFFFFFFFF
# Joe & Kuo's direction numbers (new-joe-kuo-6.21201, https://web.maths.unsw.edu.au/~fkuo/sobol/,
# BSD licence): (s, a, (m_1 … m_s)) of lines D = 2, 3, … 66, for 65 dimensions
DIRECTIONS: tuple[tuple[int, int, tuple[int, ...]], ...] = (
    (1, 0, (1,)),
    (2, 1, (1, 3)),
    (3, 1, (1, 3, 1)),
    (3, 2, (1, 1, 1)),
    (4, 1, (1, 1, 3, 3)),
    (4, 4, (1, 3, 5, 13)),
    (5, 2, (1, 1, 5, 5, 17)),
    (5, 4, (1, 1, 5, 5, 5)),
    (5, 7, (1, 1, 7, 11, 19)),
    (5, 11, (1, 1, 5, 1, 1)),
    (5, 13, (1, 1, 1, 3, 11)),
    (5, 14, (1, 3, 5, 5, 31)),
    (6, 1, (1, 3, 3, 9, 7, 49)),
    (6, 13, (1, 1, 1, 15, 21, 21)),
    (6, 16, (1, 3, 1, 13, 27, 49)),
    (6, 19, (1, 1, 1, 15, 7, 5)),
    (6, 22, (1, 3, 1, 15, 13, 25)),
    (6, 25, (1, 1, 5, 5, 19, 61)),
    (7, 1, (1, 3, 7, 11, 23, 15, 103)),
    (7, 4, (1, 3, 7, 13, 13, 15, 69)),
    (7, 7, (1, 1, 3, 13, 7, 35, 63)),
    (7, 8, (1, 3, 5, 9, 1, 25, 53)),
    (7, 14, (1, 3, 1, 13, 9, 35, 107)),
    (7, 19, (1, 3, 1, 5, 27, 61, 31)),
    (7, 21, (1, 1, 5, 11, 19, 41, 61)),
    (7, 28, (1, 3, 5, 3, 3, 13, 69)),
    (7, 31, (1, 1, 7, 13, 1, 19, 1)),
    (7, 32, (1, 3, 7, 5, 13, 19, 59)),
    (7, 37, (1, 1, 3, 9, 25, 29, 41)),
    (7, 41, (1, 3, 5, 13, 23, 1, 55)),
    (7, 42, (1, 3, 7, 3, 13, 59, 17)),
    (7, 50, (1, 3, 1, 3, 5, 53, 69)),
    (7, 55, (1, 1, 5, 5, 23, 33, 13)),
    (7, 56, (1, 1, 7, 7, 1, 61, 123)),
    (7, 59, (1, 1, 7, 9, 13, 61, 49)),
    (7, 62, (1, 3, 3, 5, 3, 55, 33)),
    (8, 14, (1, 3, 1, 15, 31, 13, 49, 245)),
    (8, 21, (1, 3, 5, 15, 31, 59, 63, 97)),
    (8, 22, (1, 3, 1, 11, 11, 11, 77, 249)),
    (8, 38, (1, 3, 1, 11, 27, 43, 71, 9)),
    (8, 47, (1, 1, 7, 15, 21, 11, 81, 45)),
    (8, 49, (1, 3, 7, 3, 25, 31, 65, 79)),
    (8, 50, (1, 3, 1, 1, 19, 11, 3, 205)),
    (8, 52, (1, 1, 5, 9, 19, 21, 29, 157)),
    (8, 56, (1, 3, 7, 11, 1, 33, 89, 185)),
    (8, 67, (1, 3, 3, 3, 15, 9, 79, 71)),
    (8, 70, (1, 3, 7, 11, 15, 39, 119, 27)),
    (8, 84, (1, 1, 3, 1, 11, 31, 97, 225)),
    (8, 97, (1, 1, 1, 3, 23, 43, 57, 177)),
    (8, 103, (1, 3, 7, 7, 17, 17, 37, 71)),
    (8, 115, (1, 3, 1, 5, 27, 63, 123, 213)),
    (8, 122, (1, 1, 3, 5, 11, 43, 53, 133)),
    (9, 8, (1, 3, 5, 5, 29, 17, 47, 173, 479)),
    (9, 13, (1, 3, 3, 11, 3, 1, 109, 9, 69)),
    (9, 16, (1, 1, 1, 5, 17, 39, 23, 5, 343)),
    (9, 22, (1, 3, 1, 5, 25, 15, 31, 103, 499)),
    (9, 25, (1, 1, 1, 11, 11, 17, 63, 105, 183)),
    (9, 44, (1, 1, 5, 11, 9, 29, 97, 231, 363)),
    (9, 47, (1, 1, 5, 15, 19, 45, 41, 7, 383)),
    (9, 52, (1, 3, 7, 7, 31, 19, 83, 137, 221)),
    (9, 55, (1, 1, 1, 3, 23, 15, 111, 223, 83)),
    (9, 59, (1, 1, 5, 13, 31, 15, 55, 25, 161)),
    (9, 62, (1, 1, 3, 13, 25, 47, 39, 87, 257)),
    (9, 67, (1, 1, 1, 11, 21, 53, 125, 249, 293)),
    (9, 74, (1, 1, 7, 11, 11, 7, 57, 79, 323)),
)
MAX_DIMENSIONS = len(DIRECTIONS)


def sobol_search(parameters: list[Parameter], count: int) -> list[dict[str, str]]:
    """`count` trials' values, as Katib's sobol gives them in order."""
    varied = sorted((p for p in parameters if not _single(p)), key=lambda p: p.name)
    if len(varied) > MAX_DIMENSIONS:
        raise ValueError(
            f"sobol here takes at most {MAX_DIMENSIONS} parameters with more than one value "
            f"({len(varied)} given): use random"
        )
    for p in (p for p in varied if p.type == "double"):
        span = float(p.space.max or 0) - float(p.space.min or 0)
        if not math.isfinite(span / float(p.space.step or 1)):
            raise ValueError(f"{p.name}: min..max spans more steps than a double holds")
    found = []
    for point in points(len(varied), count):
        values = {p.name: _single_value(p) for p in parameters if _single(p)}
        values.update({p.name: _value(p, x) for p, x in zip(varied, point, strict=True)})
        found.append({p.name: values[p.name] for p in parameters})
    return found


def points(dimensions: int, count: int) -> list[list[float]]:
    """The first `count` points of goptuna's Sobol engine of `dimensions` dimensions."""
    v = _directions(dimensions)
    x = [0] * dimensions
    found = []
    for n in range(1, count + 1):
        c = _rightmost_zero_bit(n - 1)
        x = [x[j] ^ v[j][c] for j in range(dimensions)]
        found.append([xj / 2.0**32 for xj in x])
    return found


def _directions(dimensions: int) -> list[list[int]]:
    """Each dimension's direction numbers v[1..MAX_BIT] (goptuna's `initDirectionNumbers`)."""
    v = [[0] * (MAX_BIT + 1) for _ in range(dimensions)]
    if dimensions:
        v[0] = [(1 << (32 - m)) & MASK for m in range(MAX_BIT)] + [0]  # (m = 0: 0 in 32 bits)
    for j in range(1, dimensions):
        s, a, m = DIRECTIONS[j]
        for i in range(1, s + 1):
            v[j][i] = (m[i - 1] << (32 - i)) & MASK
        for i in range(s + 1, MAX_BIT + 1):
            value = v[j][i - s] ^ (v[j][i - s] >> s)
            for k in range(1, s):
                value ^= ((a >> (s - 1 - k)) & 1) * v[j][i - k]
            v[j][i] = value
    return v


def _rightmost_zero_bit(n: int) -> int:
    """The 1-based index of n's rightmost zero bit."""
    c = 0
    while n & (1 << c):
        c += 1
    return c + 1


def _single(parameter: Parameter) -> bool:
    """goptuna's `Single()`: the distribution holds one value (a step wider than the range)."""
    space = parameter.space
    if space.list:
        return len(space.list) == 1
    low, high = float(space.min or 0), float(space.max or 0)
    if parameter.type == "int" and space.step is not None:
        return high == low or _int(space.max) - _int(space.min) < _int(space.step)
    return high == low


def _single_value(parameter: Parameter) -> str:
    space = parameter.space
    if space.list:
        return space.list[0]
    return _written(parameter, float(space.min or 0))


def _value(parameter: Parameter, point: float) -> str:
    """A point's coordinate mapped as goptuna's sampler maps it, then as Katib reads it back
    (the distribution's external value)."""
    space = parameter.space
    low: float  # (whole numbers for an int's, then as Go's float64 maths reads them)
    high: float
    if space.list:
        return space.list[math.floor(point * len(space.list))]
    if parameter.type == "int":
        low, high = _int(space.min), _int(space.max)
        if space.step is None:
            return str(_round(math.floor(point * float(high - low)) + float(low)))
        every = _int(space.step)
        inner = float(math.floor(point * float((high - low) // every)) * every + low)
        return str(_round((inner - low) / every) * every + low)
    low, high = float(space.min or 0), float(space.max or 0)
    if space.step is None:
        return _written(parameter, point * (high - low) + low)
    q = float(space.step)
    shifted_low, shifted_high = 0 - 0.5 * q, (high - low) + 0.5 * q
    x = point * (shifted_high - shifted_low) + shifted_low
    inner = min(max(_round(x / q) * q + low, low), high)
    return _written(parameter, math.floor((inner - low) / q + 0.5) * q + low)


def _int(text: str | None) -> int:
    return int(Decimal(text or "0"))  # (the model's rules: a whole number)


def _round(value: float) -> int:
    """Go's math.Round: halves away from zero."""
    return int(math.copysign(math.floor(abs(value) + 0.5), value))


def _written(parameter: Parameter, value: float) -> str:
    """A value as Katib writes it: an int's digits; a double as Go's FormatFloat(v, 'f', -1):
    its shortest decimal, no exponent, no trailing zeros."""
    if parameter.type == "int":
        return str(int(value))
    text = format(Decimal(repr(value)), "f")
    return text.rstrip("0").rstrip(".") if "." in text else text
