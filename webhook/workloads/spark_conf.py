"""The Spark settings a SparkApplication's pods are sized from, as the Kubeflow Spark operator hands them to Spark.

The operator's ``spark-submit`` gets, in this order, a later setting of a key winning as spark-submit takes them:
``spec.memoryOverheadFactor`` (as ``spark.kubernetes.memoryOverheadFactor``), every entry of ``spec.sparkConf``,
then the roles' fields (``cores``, ``coreRequest``, ``coreLimit``, ``memory``, ``memoryOverhead``,
``executor.instances``) and, when ``spec.dynamicAllocation.enabled``, its settings. So a size a role's field
leaves out may come from ``sparkConf`` (the driver pod, which the trusted operator creates, would otherwise run
bigger than the queue counted it), and ``sparkConf``'s overhead factor beats the spec's (docs/job-kinds.md).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final

from webhook.api.objects import Obj
from webhook.core.workload import WorkloadError
from webhook.workloads.base import bool_at, int_at, str_at, value_at

MIB: Final = 1024 * 1024
DEFAULT_EXECUTORS: Final = 2
_SPARK_SIZE = re.compile(r"^\s*(\d+)\s*([kmgtp]?)b?\s*$", re.IGNORECASE)
_POWERS = {"": 0, "k": 1, "m": 2, "g": 3, "t": 4, "p": 5}
ROLE_KEYS: Final = {
    "cores": "spark.{role}.cores",
    "coreRequest": "spark.kubernetes.{role}.request.cores",
    "coreLimit": "spark.kubernetes.{role}.limit.cores",
    "memory": "spark.{role}.memory",
    "memoryOverhead": "spark.{role}.memoryOverhead",
    "instances": "spark.{role}.instances",
}
"""A role's field -> the Spark key the operator passes it as."""


def spark_bytes(text: str, field: str, unit: int = MIB) -> int:
    """Spark's size notation (``512m``, ``2g``; a bare number is in ``unit``, MiB for most keys) in bytes."""
    match = _SPARK_SIZE.match(text)
    if match is None:
        raise WorkloadError(f"{field}: {text!r} is not a Spark size such as 512m or 2g")
    letter = match.group(2).lower()
    return int(match.group(1)) * (1024 ** _POWERS[letter] if letter else unit)


@dataclass(frozen=True, slots=True)
class Setting:
    """One setting's text and the field it came from (for messages)."""

    text: str
    where: str

    def whole(self) -> int:
        try:
            value = int(self.text)
        except ValueError:
            raise WorkloadError(f"{self.where}: {self.text!r} is not a whole number") from None
        if value < 0:
            raise WorkloadError(f"{self.where}: must not be negative, got {value}")
        return value

    def flag(self) -> bool:
        return self.text.strip().lower() == "true"


class SparkConf:
    """One application's settings, read as Spark will get them (module notes)."""

    def __init__(self, obj: Obj) -> None:
        self._obj = obj
        written = value_at(obj, "spec", "sparkConf")
        self._conf = {str(key): value for key, value in written.items()} if isinstance(written, Mapping) else {}

    def conf(self, key: str) -> Setting | None:
        """``sparkConf``'s entry for ``key`` (``None`` when absent or empty)."""
        value = self._conf.get(key)
        if value is None or value == "":
            return None
        if not isinstance(value, str):
            raise WorkloadError(f"spec.sparkConf[{key}]: expected a string, got {value!r}")
        return Setting(value.strip(), f"spec.sparkConf[{key}]")

    def role(self, role: str, field: str) -> Setting | None:
        """A role's field when it is set, else the ``sparkConf`` entry of the key it is passed as."""
        value = value_at(self._obj, "spec", role, field)
        if value is not None and value != "":
            if isinstance(value, bool) or not isinstance(value, str | int):
                raise WorkloadError(f"spec.{role}.{field}: expected a string or an integer, got {value!r}")
            return Setting(str(value), f"spec.{role}.{field}")
        return self.conf(ROLE_KEYS[field].format(role=role))

    def overhead_factor(self, role: str) -> Setting | None:
        """The memory overhead factor Spark takes for ``role``: ``spark.ROLE.memoryOverheadFactor``, else
        ``spark.kubernetes.memoryOverheadFactor`` (``sparkConf``'s, passed after the spec's, beats it)."""
        for key in (f"spark.{role}.memoryOverheadFactor", "spark.kubernetes.memoryOverheadFactor"):
            if (setting := self.conf(key)) is not None:
                return setting
        text = str_at(self._obj, "spec", "memoryOverheadFactor")
        return Setting(text, "spec.memoryOverheadFactor") if text is not None else None

    def dynamic(self) -> bool:
        """Whether executors come and go (``spec.dynamicAllocation.enabled``, or ``sparkConf``'s)."""
        if bool_at(self._obj, "spec", "dynamicAllocation", "enabled"):
            return True
        setting = self.conf("spark.dynamicAllocation.enabled")
        return setting is not None and setting.flag()

    def max_executors(self) -> int | None:
        """The most executors dynamic allocation may have (``None``: unbounded, which is refused)."""
        if bool_at(self._obj, "spec", "dynamicAllocation", "enabled"):
            maximum = int_at(self._obj, None, "spec", "dynamicAllocation", "maxExecutors")
            if maximum is not None:
                return maximum
        setting = self.conf("spark.dynamicAllocation.maxExecutors")
        return None if setting is None else setting.whole()

    def executors(self) -> int:
        """How many executors the queue counts: the most dynamic allocation may have, else the instances."""
        if self.dynamic():
            return self.max_executors() or 0
        setting = self.role("executor", "instances")
        return DEFAULT_EXECUTORS if setting is None else setting.whole()

    def resources(self, role: str) -> dict[str, str]:
        """``spark.ROLE.resource.NAME.amount`` with its vendor: Spark asks Kubernetes for ``VENDOR/NAME``."""
        prefix, out = f"spark.{role}.resource.", {}
        for key in sorted(self._conf):
            name = key[len(prefix):-len(".amount")] if key.startswith(prefix) and key.endswith(".amount") else ""
            amount, vendor = self.conf(key), self.conf(f"{prefix}{name}.vendor")
            if name and "." not in name and amount is not None and vendor is not None:
                out[f"{vendor.text}/{name}"] = amount.text
        return out
