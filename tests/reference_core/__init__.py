"""The decision pass as it was at commit 8ee2269, before it was made to scale (issue 21): kept unchanged
(imports aside, and one rule: since 6447c72 a candidate an earlier plan of the pass took is not counted against
the reclaim budget, as the pass no longer walks it) as the oracle of ``tests/unit/test_decide_reference.py``,
which checks that the pass in ``webhook/core`` decides exactly the same on random snapshots. Only the modules
whose code changed are kept here; the rest (fit, ledger, quota, resources, workload) is the package's own."""
