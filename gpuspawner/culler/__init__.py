"""GPU-aware idle culler for GPU Hub notebook servers.

The standard ``jupyterhub-idle-culler`` only sees Jupyter activity: a server holding GPUs at 0% with
a "busy" kernel is never culled, and one training in a terminal can be culled while it works.  This
package decides with both signals:

- :mod:`gpuspawner.culler.decide`: the pure core (plain data in, a ``keep``/``warn``/``cull``
  decision with a human reason and the numbers behind it out; no I/O, ``now`` always passed in);
- :mod:`gpuspawner.culler.cli`: command-line parsing compatible with ``jupyterhub-idle-culler`` 2.x
  for the flags they share, plus the GPU flags and a YAML policy file (base policy, per-team and
  per-pool rules, exemptions);
- :mod:`gpuspawner.culler.service`: the pass a hub-managed service runs (``python -m
  gpuspawner.culler``): reads the hub's servers and the scheduler's GPU samples, then warns
  (a notice), culls (through the hub, audited) or clears a warning;
- :mod:`gpuspawner.culler.bench`: ``gpuhub bench culler``, 1,000 servers on simulated APIs.
"""
