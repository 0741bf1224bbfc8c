"""jitbench: a fault-injection testbed and benchmark harness for just-in-time
(JIT) checkpointing of data-parallel training.

Layers (each imports only those below it; written as import-linter contracts
in ``.importlinter`` and checked by ``lint-imports``)::

    cli                                  the typer commands (jitbench/cli/)
    harness | reports                    run/launch/sweep/metrics | tables, plots, gate, model
    faults | workloads | phases          fault injection | GPT, ResNet | events -> phase spans
    runtime                              the JIT checkpointing runtime (usable on its own)
    records | hang                       results schema, loader, verdict | hang settings
    errors                               user errors and exit statuses

- :mod:`jitbench.runtime`   the runtime: the ``Runtime`` facade, one module per
  strategy (:mod:`jitbench.runtime.strategies`, with the registry), watchdog,
  state, RNG, checkpoint files, GPU health (:mod:`jitbench.runtime.health`),
  in-process recovery pieces (:mod:`jitbench.runtime.inprocess`)
- :mod:`jitbench.harness`   run specs, launching through the elastic agent, the
  worker, sweeps, the overhead benchmark, summary metrics
- :mod:`jitbench.faults`    fault families and their schedules (injection only)
- :mod:`jitbench.workloads` reference workloads (GPT, ResNet) and their data
- :mod:`jitbench.phases`    events read once, phase spans derived once
- :mod:`jitbench.reports`   tables, plots, HTML report, regression gate, model
- :mod:`jitbench.records`   the records/results schema, the one loader, the verdict
- :mod:`jitbench.errors`    the user-error hierarchy and the exit-status table

Commands that do not train (``--help``, ``faults``, ``gate``, ``report``,
``model``, ``validate``) never import torch.
"""

import warnings as _warnings

__version__ = "0.1.0"

# The optional extra ``peers`` installs nvidia-resiliency-ext, which requires the
# ``pynvml`` distribution; pynvml 13 is a shim that warns (FutureWarning) on every
# ``import pynvml``, which ``import torch`` does. The module itself comes from
# nvidia-ml-py, a jitbench dependency; the warning is noise on every command's stderr.
_warnings.filterwarnings("ignore", message="The pynvml package is deprecated",
                         category=FutureWarning)
