"""Kubernetes label maps and label selectors: validation and matching.

Two forms are supported:

* an **equality map** (``{"app": "web"}``, as in ``nodeSelector`` or a ResourcePolicy's ``selector``): every
  pair must be present in the labels; the empty map matches everything (:func:`matches_labels`);
* a **LabelSelector** (``{"matchLabels": {...}, "matchExpressions": [{key, operator, values}]}``) with the
  operators ``In``, ``NotIn``, ``Exists`` and ``DoesNotExist`` (:class:`LabelSelector`). As in Kubernetes, the
  empty selector ``{}`` matches everything and a missing (``None``) selector matches nothing.

Validation follows ``k8s.io/apimachinery/pkg/util/validation``: a key is an optional DNS-subdomain prefix
(<= 253 characters) and ``/``, then a name of at most 63 characters of ``[A-Za-z0-9._-]`` that starts and ends
alphanumeric; a value is empty or a name-shaped string of at most 63 characters. ``validate_*`` functions
return a list of problems, each starting with the field path; they never raise, whatever the input.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import TypeVar

from webhook.core.dictmap import DictMap

_V = TypeVar("_V")


class SelectorError(ValueError):
    """A label map or selector that cannot be used; ``problems`` lists every defect with its field path."""

    def __init__(self, problems: list[str]) -> None:
        self.problems = tuple(problems)
        super().__init__("; ".join(problems))


class FrozenMap(DictMap[_V]):
    """An immutable, hashable mapping with string keys (reasons, scores, labels)."""

    __slots__ = ()

    def __init__(self, items: Mapping[str, _V] | None = None) -> None:
        self._items = dict(items) if items else {}
        self._hash = None

    def __eq__(self, other: object) -> bool:
        if isinstance(other, FrozenMap):
            return self._items == other._items
        if isinstance(other, Mapping):
            return self._items == dict(other)
        return NotImplemented

    __hash__ = DictMap.__hash__

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self._items!r})"

    def to_dict(self) -> dict[str, _V]:
        """A plain, mutable copy."""
        return dict(self._items)


class FrozenLabels(FrozenMap[str]):
    """An immutable, hashable ``str -> str`` mapping (labels, annotations, node selectors)."""

    __slots__ = ()

    @classmethod
    def of(cls, items: Mapping[str, str] | None) -> FrozenLabels:
        """``items`` itself when already frozen, else a frozen copy (``None`` is empty)."""
        if isinstance(items, FrozenLabels):
            return items
        return cls(items)


EMPTY_LABELS = FrozenLabels()
"""The empty label map."""


def matches_labels(selector: Mapping[str, str], labels: Mapping[str, str]) -> bool:
    """Whether every ``key: value`` of an equality selector is in ``labels``; ``{}`` matches everything."""
    return all(labels.get(key) == value for key, value in selector.items())


# Validation -----------------------------------------------------------------------------------------------

_NAME_MAX = 63
_PREFIX_MAX = 253
_NAME = re.compile(r"^[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$")
_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")


def label_key_problem(key: object) -> str | None:
    """Why ``key`` is not a valid label (or annotation) key, or ``None`` when it is."""
    if not isinstance(key, str):
        return f"a key must be a string, got {type(key).__name__}"
    prefix, slash, name = key.rpartition("/")
    if slash:
        if not prefix:
            return f"key {key!r}: the prefix before '/' must not be empty"
        if len(prefix) > _PREFIX_MAX or not all(_DNS_LABEL.match(part) for part in prefix.split(".")):
            return (
                f"key {key!r}: the prefix {prefix!r} must be a DNS subdomain "
                "(lower-case alphanumerics, '-' and '.', at most 253 characters)"
            )
    if not name:
        return f"key {key!r}: the name part must not be empty"
    if len(name) > _NAME_MAX:
        return f"key {key!r}: the name part must be at most 63 characters"
    if not _NAME.match(name):
        return (
            f"key {key!r}: the name part must consist of alphanumerics, '-', '_' or '.', "
            "and start and end with an alphanumeric"
        )
    return None


def label_value_problem(value: object) -> str | None:
    """Why ``value`` is not a valid label value, or ``None`` when it is."""
    if not isinstance(value, str):
        return f"a value must be a string, got {type(value).__name__}"
    if value == "":
        return None
    if len(value) > _NAME_MAX:
        return f"value {value!r} must be at most 63 characters"
    if not _NAME.match(value):
        return f"value {value!r} must consist of alphanumerics, '-', '_' or '.', and start and end with an alphanumeric"
    return None


def validate_label_map(obj: object, path: str, *, values_are_labels: bool = True) -> list[str]:
    """Problems of a ``key: value`` map at ``path``; ``None`` counts as empty.

    ``values_are_labels=False`` checks only that values are strings (annotations carry arbitrary text).
    """
    if obj is None:
        return []
    if not isinstance(obj, Mapping):
        return [f"{path}: expected a map of string keys to string values, got {type(obj).__name__}"]
    problems: list[str] = []
    for key, value in obj.items():
        where = f"{path}[{key!r}]"
        why = label_key_problem(key)
        if why is not None:
            problems.append(f"{where}: {why}")
        if values_are_labels:
            why = label_value_problem(value)
            if why is not None:
                problems.append(f"{where}: {why}")
        elif not isinstance(value, str):
            problems.append(f"{where}: a value must be a string, got {type(value).__name__}")
    return problems


def parse_label_map(obj: object, path: str, *, values_are_labels: bool = True) -> FrozenLabels:
    """A validated, frozen label map; raises :class:`SelectorError` listing every problem."""
    problems = validate_label_map(obj, path, values_are_labels=values_are_labels)
    if problems:
        raise SelectorError(problems)
    if not obj:
        return EMPTY_LABELS
    assert isinstance(obj, Mapping)
    return FrozenLabels({str(key): str(value) for key, value in obj.items()})


# LabelSelector ----------------------------------------------------------------------------------------------


class Operator(StrEnum):
    """The operators of a label selector requirement."""

    IN = "In"
    NOT_IN = "NotIn"
    EXISTS = "Exists"
    DOES_NOT_EXIST = "DoesNotExist"


@dataclass(frozen=True, slots=True)
class Requirement:
    """One ``matchExpressions`` entry."""

    key: str
    operator: Operator
    values: frozenset[str] = frozenset()

    def matches(self, labels: Mapping[str, str]) -> bool:
        """Whether ``labels`` satisfy this requirement."""
        present = self.key in labels
        if self.operator is Operator.IN:
            return present and labels[self.key] in self.values
        if self.operator is Operator.NOT_IN:
            return not present or labels[self.key] not in self.values
        if self.operator is Operator.EXISTS:
            return present
        return not present


@dataclass(frozen=True, slots=True)
class LabelSelector:
    """A parsed ``metav1.LabelSelector``; all parts must hold (logical AND).

    ``matches_nothing`` marks the selector of a missing (``None``) field, which selects no object.
    """

    match_labels: FrozenLabels = EMPTY_LABELS
    match_expressions: tuple[Requirement, ...] = ()
    matches_nothing: bool = False

    def matches(self, labels: Mapping[str, str]) -> bool:
        """Whether an object with these labels is selected."""
        if self.matches_nothing:
            return False
        return matches_labels(self.match_labels, labels) and all(
            requirement.matches(labels) for requirement in self.match_expressions
        )

    @property
    def is_everything(self) -> bool:
        """Whether the selector selects every object (``{}``)."""
        return not self.matches_nothing and not self.match_labels and not self.match_expressions


EVERYTHING = LabelSelector()
"""The empty selector: matches every label set."""
NOTHING = LabelSelector(matches_nothing=True)
"""The selector of a missing field: matches no label set."""

_OPERATORS = ", ".join(op.value for op in Operator)
_OPERATOR_NAMES = frozenset(op.value for op in Operator)


def validate_label_selector(obj: object, path: str = "selector") -> list[str]:
    """Problems of a LabelSelector at ``path`` (``None`` is valid: it selects nothing)."""
    if obj is None:
        return []
    if not isinstance(obj, Mapping):
        return [f"{path}: expected a LabelSelector map, got {type(obj).__name__}"]
    problems = validate_label_map(obj.get("matchLabels"), f"{path}.matchLabels")
    expressions = obj.get("matchExpressions")
    if expressions is None:
        return problems
    if not isinstance(expressions, list):
        problems.append(f"{path}.matchExpressions: expected a list, got {type(expressions).__name__}")
        return problems
    for index, expression in enumerate(expressions):
        problems.extend(_requirement_problems(expression, f"{path}.matchExpressions[{index}]"))
    return problems


def _requirement_problems(expression: object, where: str) -> list[str]:
    if not isinstance(expression, Mapping):
        return [f"{where}: expected a map with key, operator and values, got {type(expression).__name__}"]
    problems: list[str] = []
    key = expression.get("key")
    if key is None:
        problems.append(f"{where}.key: required")
    else:
        why = label_key_problem(key)
        if why is not None:
            problems.append(f"{where}.key: {why}")
    operator = expression.get("operator")
    values = expression.get("values")
    if values is not None and not isinstance(values, list):
        problems.append(f"{where}.values: expected a list of strings, got {type(values).__name__}")
        values = None
    elif values is not None:
        for index, value in enumerate(values):
            why = label_value_problem(value)
            if why is not None:
                problems.append(f"{where}.values[{index}]: {why}")
    if not isinstance(operator, str) or operator not in _OPERATOR_NAMES:
        problems.append(f"{where}.operator: {operator!r} is not one of {_OPERATORS}")
    elif operator in (Operator.IN, Operator.NOT_IN) and not values:
        problems.append(f"{where}.values: operator {operator} needs at least one value")
    elif operator in (Operator.EXISTS, Operator.DOES_NOT_EXIST) and values:
        problems.append(f"{where}.values: operator {operator} takes no values")
    return problems


def parse_label_selector(obj: object, path: str = "selector") -> LabelSelector:
    """A parsed LabelSelector; ``None`` gives :data:`NOTHING`, ``{}`` gives :data:`EVERYTHING`.

    Raises :class:`SelectorError` listing every problem (see :func:`validate_label_selector`).
    """
    problems = validate_label_selector(obj, path)
    if problems:
        raise SelectorError(problems)
    if obj is None:
        return NOTHING
    assert isinstance(obj, Mapping)
    requirements = tuple(
        Requirement(
            key=str(expression["key"]),
            operator=Operator(expression["operator"]),
            values=frozenset(str(value) for value in expression.get("values") or ()),
        )
        for expression in obj.get("matchExpressions") or ()
    )
    match_labels = parse_label_map(obj.get("matchLabels"), f"{path}.matchLabels")
    if not match_labels and not requirements:
        return EVERYTHING
    return LabelSelector(match_labels=match_labels, match_expressions=requirements)
