"""The submit form: its fields as typed, and their translation to ``kq submit``'s options.

Each field is checked where the console can say more than the API would (a whole number, a field left
empty); the job's own rules (a valid name, a quantity, counts) are ``kq submit``'s
(:func:`webhook.readmodel.submit.check_options`), with its flag names turned into the form's labels.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields

from webhook.console.app import BadInput, check_namespace
from webhook.readmodel.submit import DEFAULT_IMAGE, KINDS, JobOptions, SubmitError, check_options

LABELS = {
    "--name": "Name",
    "--cpu": "CPU",
    "--memory": "Memory",
    "--gpus": "GPUs",
    "--workers": "Workers",
}
"""``kq submit`` flag -> the form's label, for its messages."""
INT32_MAX = 2**31 - 1
"""Kubernetes counts (parallelism, replicas, GPUs) are 32-bit."""
MAX_TEXT = 4096


@dataclass(frozen=True, slots=True)
class SubmitForm:
    """The fields as the user typed them (shown again with the problem when one is wrong)."""

    kind: str = "job"
    namespace: str = ""
    name: str = ""
    image: str = DEFAULT_IMAGE
    cpu: str = ""
    memory: str = ""
    gpus: str = "0"
    workers: str = "1"
    command: str = ""

    @classmethod
    def from_fields(cls, values: Mapping[str, str], default_namespace: str) -> SubmitForm:
        known = {f.name for f in fields(cls)}
        given = {key: value for key, value in values.items() if key in known}
        given.setdefault("namespace", default_namespace)
        return cls(**given)


def _text(label: str, value: str, *, required: bool = False, spaces: bool = True) -> str | None:
    text = value.strip()
    if not text:
        if required:
            raise BadInput(f"{label} is required")
        return None
    if len(text) > MAX_TEXT:
        raise BadInput(f"{label} is too long ({len(text)} characters; at most {MAX_TEXT})")
    if any(ord(ch) < 32 and ch not in "\t\n\r" for ch in text):
        raise BadInput(f"{label} holds control characters")
    if not spaces and any(ch.isspace() for ch in text):
        raise BadInput(f"{label} {text[:80]!r} cannot hold spaces")
    return text


def _count(label: str, value: str, low: int) -> int:
    text = value.strip() or str(low)
    try:
        number = int(text, 10)
    except ValueError:
        raise BadInput(f"{label} must be a whole number, got {text[:40]!r}") from None
    if number < low:
        raise BadInput(f"{label} must be at least {low}, got {number}")
    if number > INT32_MAX:
        raise BadInput(f"{label} must be at most {INT32_MAX}, got {text[:40]}")
    return number


def parse_submit_form(form: SubmitForm) -> JobOptions:
    """``kq submit``'s options from the form; :class:`~webhook.console.app.BadInput` naming the field."""
    if form.kind not in KINDS:
        raise BadInput(f"Kind {form.kind[:40]!r} is not one the console submits: {', '.join(KINDS)}")
    namespace = check_namespace(form.namespace, "")
    if not namespace:
        raise BadInput("Namespace is required")
    name = _text("Name", form.name, spaces=False)
    image = _text("Image", form.image, required=True, spaces=False)
    assert image is not None
    command = _text("Command", form.command)
    options = JobOptions(
        kind=form.kind,
        namespace=namespace,
        name=name,
        image=image,
        command=(command,) if command else (),
        cpu=_text("CPU", form.cpu, spaces=False),
        memory=_text("Memory", form.memory, spaces=False),
        gpus=_count("GPUs", form.gpus, 0),
        workers=_count("Workers", form.workers, 1),
    )
    try:
        check_options(options)
    except SubmitError as error:
        message = str(error)
        for flag, label in LABELS.items():
            if message.startswith(flag):
                message = label + message[len(flag):]
        raise BadInput(message) from None
    return options
