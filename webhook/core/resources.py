"""Immutable resource lists (``{"cpu": ..., "memory": ..., "nvidia.com/gpu": ...}``) in nano-units.

A name that is absent reads as zero in arithmetic. Whether an absent name in a *limit* means "unlimited"
or "zero" is the caller's choice: see :meth:`Resources.exceeding`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from fractions import Fraction
from itertools import chain
from operator import itemgetter, methodcaller

from webhook.api.names import MAX_JOBS
from webhook.core.dictmap import DictMap
from webhook.core.quantity import QuantityError, format_quantity, parse_quantity

_BINARY_HINTS = ("memory", "storage", "hugepages-")


def is_binary_resource(name: str) -> bool:
    """Whether a resource is best shown with binary suffixes (memory, storage, hugepages)."""
    return any(hint in name for hint in _BINARY_HINTS)


class ResourceError(ValueError):
    """A resource list that cannot be read: names the resource and the bad value."""

    def __init__(self, resource: str, error: QuantityError | str) -> None:
        self.resource = resource
        why = error.why if isinstance(error, QuantityError) else error
        text = f" {error.text!r}" if isinstance(error, QuantityError) else ""
        super().__init__(f"resource {resource!r}: invalid quantity{text}: {why}")


class Resources(DictMap[int]):
    """An immutable mapping of resource name to nano-units; hashable and cheap to combine."""

    __slots__ = ()

    def __init__(self, items: Mapping[str, int] | Iterable[tuple[str, int]] = ()) -> None:
        self._items = dict(items)
        self._hash = None

    @classmethod
    def parse(cls, spec: Mapping[str, object] | None) -> Resources:
        """Read a Kubernetes resource list (``{"cpu": "100m", "memory": "1Gi"}``).

        Raises :class:`ResourceError` naming the resource whose quantity does not parse.
        """
        if spec is None:
            return EMPTY
        if not isinstance(spec, Mapping):
            raise ResourceError("<list>", f"expected a mapping of resource name to quantity, got {spec!r}")
        items: dict[str, int] = {}
        for name, raw in spec.items():
            if not isinstance(name, str) or not name:
                raise ResourceError(str(name), "resource names must be non-empty strings")
            try:
                items[name] = parse_quantity(raw)  # type: ignore[arg-type]
            except QuantityError as error:
                raise ResourceError(name, error) from None
        return cls.adopt(items)

    @classmethod
    def of(cls, **whole_units: int | str) -> Resources:
        """Builder for tests and examples: ``Resources.of(cpu=10, memory="10Gi", gpu=1)``.

        ``gpu`` is shorthand for ``nvidia.com/gpu`` and ``max_jobs`` for ``kube-queue/max-jobs``.
        """
        aliases = {"gpu": "nvidia.com/gpu", "max_jobs": MAX_JOBS}
        return cls.adopt({aliases.get(k, k): parse_quantity(v) for k, v in whole_units.items()})

    # Reads (DictMap: straight from the dictionary) ---------------------------------------------------------
    def get_or_zero(self, name: str) -> int:
        """The amount of ``name``; zero when absent."""
        return self._items.get(name, 0)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Resources):
            return self._items == other._items
        return NotImplemented

    __hash__ = DictMap.__hash__

    def __repr__(self) -> str:
        return f"Resources({self.to_spec()!r})"

    # Arithmetic -------------------------------------------------------------------------------------------
    def __add__(self, other: Mapping[str, int]) -> Resources:
        if not other:
            return self
        if not self._items:
            return other if isinstance(other, Resources) else Resources(other)
        items = dict(self._items)
        for name, amount in other.items():
            items[name] = items.get(name, 0) + amount
        return Resources.adopt(items)

    def __sub__(self, other: Mapping[str, int]) -> Resources:
        if not other:
            return self
        items = dict(self._items)
        for name, amount in other.items():
            items[name] = items.get(name, 0) - amount
        return Resources.adopt(items)

    def __mul__(self, factor: int) -> Resources:
        return Resources.adopt({name: amount * factor for name, amount in self._items.items()})

    __rmul__ = __mul__

    def scale(self, rate: Fraction | int) -> Resources:
        """Multiply by an exact rate, rounding each amount down to whole nano-units."""
        rate = Fraction(rate)
        return Resources.adopt(
            {name: amount * rate.numerator // rate.denominator for name, amount in self._items.items()}
        )

    def clamp_min_zero(self) -> Resources:
        """Negative amounts become zero (what is left can never be negative)."""
        return Resources.adopt({name: max(0, amount) for name, amount in self._items.items()})

    def only(self, names: Iterable[str]) -> Resources:
        """The sub-list of the given names that are present."""
        return Resources.adopt({name: self._items[name] for name in names if name in self._items})

    def without_zeros(self) -> Resources:
        """Drop names whose amount is zero."""
        return Resources.adopt({name: amount for name, amount in self._items.items() if amount})

    # Comparison -------------------------------------------------------------------------------------------
    def fits_within(self, limit: Mapping[str, int], absent_is_unlimited: bool = True) -> bool:
        """Whether every positive amount here is ``<=`` the limit's amount of the same name."""
        for name, amount in self._items.items():
            if amount <= 0:
                continue
            cap = limit.get(name)
            if cap is None:
                if absent_is_unlimited:
                    continue
                return False
            if amount > cap:
                return False
        return True

    def is_zero(self) -> bool:
        """Whether every amount is zero (or the list is empty)."""
        return not any(self._items.values())

    def any_negative(self) -> bool:
        """Whether some amount is below zero."""
        return any(amount < 0 for amount in self._items.values())

    # Output -----------------------------------------------------------------------------------------------
    def to_spec(self) -> dict[str, str]:
        """A Kubernetes resource list of canonical quantity strings, sorted by name."""
        return {
            name: format_quantity(self._items[name], is_binary_resource(name)) for name in sorted(self._items)
        }

    def describe(self) -> str:
        """``cpu=10, memory=10Gi`` for messages."""
        return ", ".join(f"{name}={text}" for name, text in self.to_spec().items()) or "nothing"


EMPTY = Resources()
"""The empty resource list."""


SHARED_KEPT = 4096
"""How many distinct resource lists :func:`shared` holds before it starts afresh."""
_shared: dict[Resources, Resources] = {}


def shared(resources: Resources) -> Resources:
    """An equal list already in use, else ``resources`` (kept for the next caller): tens of thousands of
    queued jobs ask for a few shapes, and each keeps its request for as long as it waits (issue 38). Values
    never change, so sharing changes no result."""
    kept = _shared.get(resources)
    if kept is not None:
        return kept
    if len(_shared) >= SHARED_KEPT:
        _shared.clear()
    _shared[resources] = resources
    return resources


def total(lists: Iterable[Mapping[str, int]]) -> Resources:
    """The sum of resource lists."""
    items: dict[str, int] = {}
    for resources in lists:
        for name, amount in resources.items():
            items[name] = items.get(name, 0) + amount
    return Resources(items)


def column(amounts: Sequence[Mapping[str, int]], name: str) -> list[int]:
    """What each of ``amounts`` asks for of ``name`` (zero where absent), at C speed: a plain lookup while
    every one of them names it (the usual case, twice as fast as a lookup with a default)."""
    try:
        return list(map(itemgetter(name), amounts))
    except KeyError:
        return list(map(methodcaller("get", name, 0), amounts))


def add_amounts(into: dict[str, int], amounts: Sequence[Mapping[str, int]]) -> dict[str, int]:
    """Add to ``into`` what all of ``amounts`` ask for, per resource in the order the resources first appear;
    returns ``into``. Each resource's sum runs at C speed over the list (a quota may hold a million jobs)."""
    for name in dict.fromkeys(chain.from_iterable(amounts)):
        into[name] = into.get(name, 0) + sum(column(amounts, name))
    return into


def least_amounts(amounts: Sequence[Mapping[str, int]], names: Iterable[str] | None = None) -> dict[str, int]:
    """Per resource of ``names`` (default: every resource of ``amounts``, in the order they first appear), the
    least any of ``amounts`` asks for; a resource one of them does not ask for counts as zero there."""
    names = dict.fromkeys(chain.from_iterable(amounts)) if names is None else names
    return {name: min(column(amounts, name)) for name in names}
