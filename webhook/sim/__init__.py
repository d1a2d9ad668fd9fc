"""Virtual-clock simulator over the live controller's decision code (``kq simulate``; see README.md here).

* :mod:`webhook.sim.scenario`: scenario files (tree, nodes, settings, timed job manifests);
* :mod:`webhook.sim.engine`: the clock, carrying out the decisions of a :class:`~webhook.sim.engine.CorePath`
  (``kq simulate`` passes the controller's own ``decide``);
* :mod:`webhook.sim.nodes`: pod-level quota and a first-fit node-capacity model;
* :mod:`webhook.sim.report`: per-quota figures, the timeline, JSON and text;
* :mod:`webhook.sim.peer`: the peer's (Kueue's) scheduler performance shape as a scenario.
"""
