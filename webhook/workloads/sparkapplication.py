"""SparkApplication (``sparkoperator.k8s.io/v1beta2``, the Kubeflow Spark operator): held by ``spec.suspend``.

The operator runs ``spark-submit``, which creates the driver pod; the driver creates the executors. Neither
pod is written as a template in the object, so the pod sets are built the way Spark sizes them (the API the
operator publishes, v2.4.0; docs/job-kinds.md):

* CPU: ``coreRequest``, else ``cores`` (default 1) as the request; ``coreLimit`` as the limit;
* memory (request = limit): ``memory`` (Spark's units: ``512m``, ``2g``; no unit = MiB; default ``1g``) plus
  the overhead: ``memoryOverhead`` when given, else ``memoryOverheadFactor`` (the spec's; default 0.1 for JVM
  applications, 0.4 for Python and R) times the memory, at least 384 MiB; ``memoryLimit`` when larger;
* ``gpu: {name, quantity}`` as an extended resource; ``sidecars`` add their requests, ``initContainers``
  count as init containers;
* executors: ``instances`` (Spark's default 2), or with ``dynamicAllocation.enabled`` its ``maxExecutors``
  (required: without it an application could grow without bound); off-heap memory when enabled, and for
  Python ``spark.executor.pyspark.memory``, add to each;
* each of those settings as Spark gets it: a role's field, else ``spec.sparkConf``'s entry for the key the
  operator passes the field as; the overhead factor of ``sparkConf`` beats ``spec.memoryOverheadFactor``;
  ``spark.ROLE.resource.NAME.amount`` with its vendor as the extended resource ``VENDOR/NAME``
  (:mod:`webhook.workloads.spark_conf`);
* ``template`` (a pod template, which Spark builds the role's pods on): its first container is Spark's, whose
  other requests and limits stay beside the CPU and memory Spark writes; its other containers and init
  containers count as they are; a ``runtimeClassName`` brings its class's overhead, recorded on the
  application as for any job (:mod:`webhook.workloads.overhead`).

The driver pod belongs to the application; the executors belong to the driver pod (``<name>-driver``, or
``driver.podName``): both are its pods. The driver creates the executors under a ServiceAccount of the user's
namespace, so the webhook holds them; the controller releases them within what the application was admitted
with (:mod:`webhook.core.spawned`).
"""

from __future__ import annotations

from decimal import Decimal, InvalidOperation
from typing import cast

from webhook.api.names import QUOTA_FULLNAME_ANNOTATION, QUOTA_LABEL
from webhook.api.objects import Doc, Obj, PodSpec, mapping, mappings
from webhook.core.workload import PodSet, WorkloadError, pod_set
from webhook.workloads.base import (
    JSONPatch,
    PodTemplate,
    SpecSuspendAdapter,
    apply_patch,
    mapping_at,
    metadata_patch,
    set_value_patch,
    str_at,
    value_at,
)
from webhook.workloads.overhead import recorded, with_overhead
from webhook.workloads.spark_conf import MIB, SparkConf, spark_bytes

MIN_OVERHEAD_MIB = 384
ROLES = ("driver", "executor")


def _mib(amount: int) -> str:
    return f"{-(-amount // MIB)}Mi"


class SparkApplicationAdapter(SpecSuspendAdapter):
    """``sparkoperator.k8s.io/v1beta2`` ``SparkApplication``."""

    group = "sparkoperator.k8s.io"
    versions = ("v1beta2",)
    kind = "SparkApplication"
    plural = "sparkapplications"
    extra_class_fields = tuple(path for role in ROLES for path in (
        ("spec", role, "priorityClassName"), ("spec", role, "template", "spec", "priorityClassName")))
    extra_label_fields = (("spec", "driver", "labels"), ("spec", "executor", "labels"))
    spawned_pod_set = "executor"

    def pod_templates(self, obj: Obj) -> tuple[PodTemplate, ...]:
        """None written as pod templates: the pods are built from the driver and executor fields."""
        return ()

    def pod_spec_patches(self, obj: Obj) -> dict[str, Obj]:
        """Each role's ``template.spec``: Spark builds the role's pods on it, so the RuntimeClass it names is
        recorded and a ``nodeName`` in it refused, as in any job's template."""
        return {f"spec.{role}.template.spec": spec for role in ROLES
                if (spec := mapping_at(obj, "spec", role, "template", "spec")) is not None}

    def pod_sets(self, obj: Obj) -> tuple[PodSet, ...]:
        out: list[PodSet] = []
        overheads, conf = recorded(obj), SparkConf(obj)
        for role in ROLES:
            try:
                spec = with_overhead(self._spec(obj, conf, role), overheads)
                out.append(pod_set(role, self._count(conf, role), spec))
            except WorkloadError as error:
                raise WorkloadError(f"/spec/{role}: {error}") from None
        return tuple(out)

    def _count(self, conf: SparkConf, role: str) -> int:
        return 1 if role == "driver" else conf.executors()

    def _spec(self, obj: Obj, conf: SparkConf, role: str) -> PodSpec:
        """The pod spec whose request is what Spark asks for this role's pods: its ``template``'s, with
        Spark's requests in its first container (in a container of their own without one), and the operator's
        sidecars and init containers added."""
        cores = conf.role(role, "cores")
        cpu = conf.role(role, "coreRequest") or cores
        memory_setting = conf.role(role, "memory")
        memory = spark_bytes(memory_setting.text, memory_setting.where) if memory_setting else 1024 * MIB
        overhead_setting = conf.role(role, "memoryOverhead")
        if overhead_setting is not None:
            overhead = spark_bytes(overhead_setting.text, overhead_setting.where)
        else:
            floor = conf.conf(f"spark.{role}.minMemoryOverhead")
            minimum = spark_bytes(floor.text, floor.where) if floor else MIN_OVERHEAD_MIB * MIB
            overhead = max(int(memory * self._overhead_factor(obj, conf, role)), minimum)
        total = memory + overhead + (self._executor_extra(obj, conf) if role == "executor" else 0)
        limit_text = str_at(obj, "spec", role, "memoryLimit")
        if limit_text is not None:
            total = max(total, spark_bytes(limit_text, f"spec.{role}.memoryLimit"))
        extended = conf.resources(role)
        requests: dict[str, str] = {"cpu": cpu.text if cpu else "1", "memory": _mib(total), **extended}
        limits: dict[str, str] = {"memory": _mib(total), **extended}
        core_limit = conf.role(role, "coreLimit")
        if core_limit is not None:
            limits["cpu"] = core_limit.text
        gpu = mapping_at(obj, "spec", role, "gpu")
        if gpu is not None and gpu.get("name"):
            quantity = gpu.get("quantity")
            requests[str(gpu["name"])] = limits[str(gpu["name"])] = str(quantity if quantity is not None else 1)
        template = mapping_at(obj, "spec", role, "template", "spec") or {}
        own = mappings(template.get("containers"))
        main: Obj = own[0] if own else {"name": f"spark-{role}"}
        written = mapping(main.get("resources"))
        main = {**main, "resources": {
            "requests": {**mapping(written.get("requests")), **requests},
            "limits": {**mapping(written.get("limits")), **limits}}}
        fields = mapping_at(obj, "spec", role) or {}
        spec: Doc = {**template, "containers": [main, *own[1:], *mappings(fields.get("sidecars"))]}
        inits = [*mappings(template.get("initContainers")), *mappings(fields.get("initContainers"))]
        if inits:
            spec["initContainers"] = inits
        return cast(PodSpec, spec)

    def _overhead_factor(self, obj: Obj, conf: SparkConf, role: str) -> Decimal:
        setting = conf.overhead_factor(role)
        if setting is not None:
            try:
                return Decimal(setting.text)
            except InvalidOperation:
                raise WorkloadError(f"{setting.where}: {setting.text!r} is not a number such as 0.1") from None
        return Decimal("0.1") if self._jvm(obj) else Decimal("0.4")

    @staticmethod
    def _jvm(obj: Obj) -> bool:
        return (str_at(obj, "spec", "type") or "Scala") in ("Java", "Scala")

    def _executor_extra(self, obj: Obj, conf: SparkConf) -> int:
        """What Spark adds to an executor's memory beyond the overhead: its off-heap memory when enabled (a bare
        number in bytes) and, for Python, ``spark.executor.pyspark.memory``."""
        extra = 0
        enabled, size = conf.conf("spark.memory.offHeap.enabled"), conf.conf("spark.memory.offHeap.size")
        if enabled is not None and enabled.flag() and size is not None:
            extra += spark_bytes(size.text, size.where, unit=1)
        pyspark = conf.conf("spark.executor.pyspark.memory")
        if pyspark is not None and not self._jvm(obj):
            extra += spark_bytes(pyspark.text, pyspark.where)
        return extra

    def queueing_problems(self, obj: Obj) -> list[str]:
        conf = SparkConf(obj)
        if conf.dynamic() and conf.max_executors() is None:
            return [
                "spec.dynamicAllocation.maxExecutors (or spark.dynamicAllocation.maxExecutors in spec.sparkConf) "
                "must be set: with dynamic allocation the queue counts the most executors the application may "
                "have, and without a maximum it could grow without bound"
            ]
        return []

    def priority_class_name(self, obj: Obj) -> str | None:
        """The first class named among :attr:`extra_class_fields` (a role's own field, then its template's)."""
        return next((name for path in self.extra_class_fields if (name := str_at(obj, *path))), None)

    def explicit_priority(self, obj: Obj) -> int | None:
        return None

    def tag_patch(self, obj: Obj, leaf_name: str, full_name: str) -> list[JSONPatch]:
        """The application, and the labels and annotations the operator puts on its driver and executors."""
        ops = metadata_patch(obj, (), {QUOTA_LABEL: leaf_name}, {QUOTA_FULLNAME_ANNOTATION: full_name})
        current = obj
        for role in ROLES:
            for field, key, value in (("labels", QUOTA_LABEL, leaf_name),
                                      ("annotations", QUOTA_FULLNAME_ANNOTATION, full_name)):
                step = set_value_patch(current, ("spec", role, field, key), value)
                if step:  # each step sees the ones before (they may create the same parents)
                    current = apply_patch(current, step)
                    ops += step
        return ops

    def pod_owners(self, obj: Obj) -> tuple[tuple[str, str], ...]:
        name = value_at(obj, "metadata", "name")
        if not isinstance(name, str) or not name:
            return ()
        driver = str_at(obj, "spec", "driver", "podName") or f"{name}-driver"
        return ((self.kind, name), ("Pod", driver))

    def needs_all_pods(self, obj: Obj) -> bool:
        """No gang: the driver runs the application and takes executors as they come (with dynamic allocation it
        starts with ``initialExecutors``, often none), so it has started once one of its pods runs."""
        return False

    def is_finished(self, obj: Obj) -> bool:
        return value_at(obj, "status", "applicationState", "state") in ("COMPLETED", "FAILED")


ADAPTERS = (SparkApplicationAdapter(),)
