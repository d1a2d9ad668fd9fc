"""Shared Kubernetes I/O: client construction with explicit timeouts and watch-fed caches; and the shells'
shared process plumbing (serving, the collector paused over a decision pass).

Imported by the shells (admission service, controller, CLI); never by ``webhook.core`` or
``webhook.workloads``.
"""
