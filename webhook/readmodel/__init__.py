"""The client-side read model both faces sit on: ``kq``'s commands (:mod:`webhook.cli`) and the web console
(:mod:`webhook.console`) read the cluster and say what they found with the same code.

It holds the API access (:mod:`~webhook.readmodel.kubeapi`, :mod:`~webhook.readmodel.kubeconfig`,
:mod:`~webhook.readmodel.context`), the snapshot and the job views (:mod:`~webhook.readmodel.fetch`,
:mod:`~webhook.readmodel.view`, :mod:`~webhook.readmodel.jobs`), why a job waits and when it should start
(:mod:`~webhook.readmodel.waiting`, :mod:`~webhook.readmodel.explain`, :mod:`~webhook.readmodel.eta`), quota
usage and the Queues (:mod:`~webhook.readmodel.usage`, :mod:`~webhook.readmodel.queues`), which pods to read the
logs of (:mod:`~webhook.readmodel.logs`), the jobs to submit (:mod:`~webhook.readmodel.submit`), tables and text
(:mod:`~webhook.readmodel.output`) and the command-line plumbing both faces' commands share
(:mod:`~webhook.readmodel.commandline`). It imports neither face.
"""
