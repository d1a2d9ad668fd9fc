"""Shared Kubernetes I/O: client construction with explicit timeouts and watch-fed caches.

Imported by the shells (admission service, controller, CLI); never by ``webhook.core`` or
``webhook.workloads``.
"""
