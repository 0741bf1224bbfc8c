"""In-process recovery (``jit-inprocess``): survivors keep their processes.

- :mod:`~jitbench.runtime.inprocess.membership`: generations, failure reports,
  the leader's decision and the spare pool, all in one c10d store.
- :mod:`~jitbench.runtime.inprocess.transfer`: the boundary state sent from a
  healthy replica to every other member over the new process group.
"""
