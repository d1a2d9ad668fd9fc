"""The wire: every name the system reads or writes on Kubernetes objects, defined once.

* :mod:`webhook.api.names` - labels, annotations, scheduling gates, namespaces, Event reasons, components;
* :mod:`webhook.api.kinds` - the API resources (group, version, plural, kind) the system reads and writes;
* :mod:`webhook.api.objects` - typed read-only views of raw objects (metadata, owner references).

Standard library only, no I/O: the core, the adapters and every shell import it (docs/architecture.md).
"""
