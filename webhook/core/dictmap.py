"""The read side shared by the core's immutable string-keyed mappings (:class:`~webhook.core.resources.Resources`,
:class:`~webhook.core.selectors.FrozenMap`): a dictionary nobody changes, its hash cached.

Every read goes straight to the dictionary: ``Mapping``'s own ``get``, ``in``, ``keys``, ``items`` and
``values`` go through ``__getitem__`` one key at a time, and the decisions read resource lists and labels on
every request. Equality is the subclasses' (each has its own), and with it their ``__hash__``: a class that
defines ``__eq__`` loses the inherited ``__hash__`` unless it names it again (``__hash__ = DictMap.__hash__``).
"""

from __future__ import annotations

from collections.abc import ItemsView, Iterator, KeysView, Mapping, ValuesView
from typing import Self, TypeVar, overload

_V = TypeVar("_V")
_T = TypeVar("_T")


class DictMap(Mapping[str, _V]):
    """A ``str -> _V`` mapping over a dictionary it never changes."""

    __slots__ = ("_hash", "_items")

    _items: dict[str, _V]
    _hash: int | None

    @classmethod
    def adopt(cls, items: dict[str, _V]) -> Self:
        """A map over ``items`` itself, not a copy: the caller hands the dictionary over and never changes it."""
        out = cls.__new__(cls)
        out._items = items
        out._hash = None
        return out

    def __getitem__(self, key: str) -> _V:
        return self._items[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._items)

    def __len__(self) -> int:
        return len(self._items)

    def __contains__(self, key: object) -> bool:
        return key in self._items

    def keys(self) -> KeysView[str]:
        return self._items.keys()

    def items(self) -> ItemsView[str, _V]:
        return self._items.items()

    def values(self) -> ValuesView[_V]:
        return self._items.values()

    @overload
    def get(self, key: str, /) -> _V | None: ...

    @overload
    def get(self, key: str, default: _V | _T, /) -> _V | _T: ...

    def get(self, key: str, default: object = None, /) -> object:
        return self._items.get(key, default)

    def __hash__(self) -> int:
        if self._hash is None:
            self._hash = hash(frozenset(self._items.items()))
        return self._hash
