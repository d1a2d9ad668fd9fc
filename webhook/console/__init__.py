"""``kq console``: the web console for developers (their jobs, why they wait, logs, submit, delete) and
operators (the quota tree as a picture, the queues, the controller's recent decisions).

It acts as the person using it and never as itself (:mod:`webhook.console.identity`): every API request
carries that person's credentials, so Kubernetes RBAC decides what they see and do. What it shows is
computed by the same code as ``kq list``, ``kq why`` and ``kq top quota``: the read model both faces sit on
(:mod:`webhook.readmodel`: :mod:`~webhook.readmodel.view`, :mod:`~webhook.readmodel.explain`,
:mod:`~webhook.readmodel.queues`); see docs/console.md.
"""
