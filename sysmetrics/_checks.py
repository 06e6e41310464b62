"""Shape checks shared by the options of the monitor, the collectors and the callbacks."""

from __future__ import annotations

import operator
from collections.abc import Iterable, Mapping


def positive_int(value: object) -> int | None:
    """``value`` as an int if it is a positive integer (numpy's included, bool not)."""
    if isinstance(value, bool):
        return None
    try:
        n = operator.index(value)  # type: ignore[arg-type]  # raises for non-integers
    except TypeError:
        return None
    return n if n > 0 else None


def one_or_many(value: object, one: type | tuple[type, ...]) -> list[object] | None:
    """An option that takes "an item or a list of them", as a list; None if neither.

    ``[value]`` if it is a ``one``, else the items of any iterable but bytes or a mapping.
    """
    if isinstance(value, one):
        return [value]
    if isinstance(value, Iterable) and not isinstance(value, (bytes, Mapping)):
        return list(value)
    return None
