"""jitbench: a fault-injection testbed and benchmark harness for just-in-time
(JIT) checkpointing of data-parallel training.

Subpackages (dependencies point one way: cli -> harness -> {runtime, faults,
workloads}; reports reads records only; runtime imports nothing from harness):

- :mod:`jitbench.runtime`   the bundled JIT checkpointing runtime
- :mod:`jitbench.harness`   run specs, launching, event collection, metrics
- :mod:`jitbench.faults`    fault families and their schedules
- :mod:`jitbench.workloads` reference workloads (GPT, ResNet) and their data
- :mod:`jitbench.reports`   tables, plots, gates, analytic model
"""

__version__ = "0.1.0"
