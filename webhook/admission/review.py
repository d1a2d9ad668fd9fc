"""The ``admission.k8s.io/v1`` AdmissionReview codec.

:func:`parse_request` turns a decoded review into an :class:`AdmissionRequest` or raises
:class:`ReviewError`; :func:`allow` and :func:`deny` build the response review (``uid`` echoed, a patch as
base64 JSON Patch with ``patchType: JSONPatch``). Nothing here knows about quotas.
"""

from __future__ import annotations

import base64
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal, NotRequired, TypedDict

import orjson

from webhook.api.kinds import ADMISSION_REVIEW
from webhook.api.objects import Obj

API_VERSION = ADMISSION_REVIEW.api_version
KIND = ADMISSION_REVIEW.kind
OPERATIONS = frozenset({"CREATE", "UPDATE", "DELETE", "CONNECT"})


class ReviewError(ValueError):
    """A request body that is not a usable AdmissionReview. With a ``uid`` the service answers with a
    refusal review; without one it answers HTTP 400."""

    def __init__(self, message: str, uid: str | None = None) -> None:
        self.message = message
        self.uid = uid
        super().__init__(message)


class Status(TypedDict):
    """A refusal's ``response.status`` (a ``metav1.Status``)."""

    status: Literal["Failure"]
    code: int
    reason: str
    message: str


class AdmissionResponse(TypedDict):
    """The ``response`` of an answering review."""

    uid: str
    allowed: bool
    patchType: NotRequired[Literal["JSONPatch"]]
    patch: NotRequired[str]
    """Base64 of the JSON Patch."""
    warnings: NotRequired[list[str]]
    status: NotRequired[Status]


class AdmissionReview(TypedDict):
    """An answering ``admission.k8s.io/v1`` AdmissionReview, as the handlers return it."""

    apiVersion: str
    kind: str
    response: AdmissionResponse


@dataclass(frozen=True, slots=True)
class GroupVersionKind:
    group: str
    version: str
    kind: str

    def __str__(self) -> str:
        return f"{self.kind}.{self.version}.{self.group}" if self.group else f"{self.kind}.{self.version}"


@dataclass(frozen=True, slots=True)
class AdmissionRequest:
    """The parts of ``request`` the handlers use. ``obj``/``old_obj`` are the raw objects (``None`` when the
    operation has none: no ``object`` on DELETE, no ``oldObject`` on CREATE)."""

    uid: str
    kind: GroupVersionKind
    resource: str
    sub_resource: str
    name: str
    namespace: str
    operation: str
    username: str
    groups: tuple[str, ...]
    obj: Obj | None
    old_obj: Obj | None
    dry_run: bool = False
    resource_group: str = ""
    """``request.resource.group``: with ``resource``, what was written (a subresource's kind is its own, a
    ``scale``'s ``autoscaling/v1`` ``Scale``); ``""`` for the core group."""

    @property
    def display_name(self) -> str:
        """``Job user-a/pi`` for messages."""
        name = self.name
        if not name and self.obj is not None:
            metadata = self.obj.get("metadata")
            if isinstance(metadata, Mapping):
                name = str(metadata.get("name") or metadata.get("generateName") or "")
        where = f"{self.namespace}/{name}" if self.namespace else name
        return f"{self.kind.kind} {where}".strip()


def _text(value: object, field: str, uid: str | None, *, required: bool = False) -> str:
    if value is None:
        if required:
            raise ReviewError(f"request.{field} is missing", uid)
        return ""
    if not isinstance(value, str):
        raise ReviewError(f"request.{field} must be a string", uid)
    return value


def _object(value: object, field: str, uid: str) -> Obj | None:
    if value is None:
        return None
    if not isinstance(value, Mapping):
        raise ReviewError(f"request.{field} must be an object", uid)
    return value


def parse_request(review: object) -> AdmissionRequest:
    """Read an AdmissionReview (already JSON-decoded). Raises :class:`ReviewError` naming what is wrong."""
    if not isinstance(review, Mapping):
        raise ReviewError("the body must be a JSON object (an AdmissionReview)")
    request = review.get("request")
    uid: str | None = None
    if isinstance(request, Mapping):
        raw_uid = request.get("uid")
        uid = raw_uid if isinstance(raw_uid, str) and raw_uid else None
    if review.get("apiVersion") != API_VERSION or review.get("kind") != KIND:
        raise ReviewError(
            f"apiVersion and kind: expected apiVersion {API_VERSION} kind {KIND}, "
            f"got apiVersion {review.get('apiVersion')!r} kind {review.get('kind')!r}",
            uid,
        )
    if not isinstance(request, Mapping):
        raise ReviewError("request is missing or not an object")
    if uid is None:
        raise ReviewError("request.uid is missing")
    kind = request.get("kind")
    if not isinstance(kind, Mapping):
        raise ReviewError("request.kind is missing or not an object", uid)
    gvk = GroupVersionKind(
        group=_text(kind.get("group"), "kind.group", uid),
        version=_text(kind.get("version"), "kind.version", uid),
        kind=_text(kind.get("kind"), "kind.kind", uid, required=True),
    )
    resource = request.get("resource")
    operation = _text(request.get("operation"), "operation", uid, required=True)
    if operation not in OPERATIONS:
        raise ReviewError(f"request.operation {operation!r} is not one of {', '.join(sorted(OPERATIONS))}", uid)
    user = request.get("userInfo")
    if user is not None and not isinstance(user, Mapping):
        raise ReviewError("request.userInfo must be an object", uid)
    user = user or {}
    groups = user.get("groups") or []
    if not isinstance(groups, list) or not all(isinstance(group, str) for group in groups):
        raise ReviewError("request.userInfo.groups must be a list of strings", uid)
    dry_run = request.get("dryRun")
    return AdmissionRequest(
        uid=uid,
        kind=gvk,
        resource=_text(resource.get("resource"), "resource.resource", uid) if isinstance(resource, Mapping) else "",
        sub_resource=_text(request.get("subResource"), "subResource", uid),
        name=_text(request.get("name"), "name", uid),
        namespace=_text(request.get("namespace"), "namespace", uid),
        operation=operation,
        username=_text(user.get("username"), "userInfo.username", uid),
        groups=tuple(groups),
        obj=_object(request.get("object"), "object", uid),
        old_obj=_object(request.get("oldObject"), "oldObject", uid),
        dry_run=dry_run is True,
        resource_group=_text(resource.get("group"), "resource.group", uid) if isinstance(resource, Mapping) else "",
    )


def _review(response: AdmissionResponse) -> AdmissionReview:
    return {"apiVersion": API_VERSION, "kind": KIND, "response": response}


def allow(uid: str, patch: Sequence[Obj] = (), warnings: Sequence[str] = ()) -> AdmissionReview:
    """An allowing response; a non-empty ``patch`` goes out as base64 JSON Patch."""
    response: AdmissionResponse = {"uid": uid, "allowed": True}
    if patch:
        response["patchType"] = "JSONPatch"
        response["patch"] = base64.b64encode(orjson.dumps(list(patch))).decode("ascii")
    if warnings:
        response["warnings"] = list(warnings)
    return _review(response)


def deny(uid: str, message: str, code: int = 403, reason: str = "Forbidden") -> AdmissionReview:
    """A refusal; ``message`` is what ``kubectl`` prints after "admission webhook ... denied the request"."""
    return _review(
        {
            "uid": uid,
            "allowed": False,
            "status": {"status": "Failure", "code": code, "reason": reason, "message": message},
        }
    )


def encode(review: AdmissionReview) -> bytes:
    return orjson.dumps(review)


def decoded_patch(review: Obj) -> list[Obj]:
    """The JSON Patch of a response review (``[]`` when none); for tests and tools."""
    response = review.get("response")
    if not isinstance(response, Mapping) or not response.get("patch"):
        return []
    ops = orjson.loads(base64.b64decode(str(response["patch"])))
    if not isinstance(ops, list) or not all(isinstance(op, Mapping) for op in ops):
        raise ValueError("the patch is not a JSON list of operations")
    return ops
