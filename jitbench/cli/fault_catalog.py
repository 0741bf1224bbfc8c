"""Every fault kind as plain data, for ``jitbench faults`` without importing torch.

:mod:`jitbench.faults` imports torch when it is imported (its package imports
every fault module, and :mod:`jitbench.faults.collective` and
:mod:`jitbench.faults.storage` need torch), so the listing reads this copy of
the classes' declared data. :func:`live_rows` computes it from the classes;
``python -m jitbench.cli.fault_catalog`` rewrites :data:`ROWS` from them, and
``tests/unit/test_cli_imports.py`` fails when the two differ.
"""

from __future__ import annotations

from pathlib import Path
from pprint import pformat


def live_rows() -> list[dict]:
    """One row per fault kind from :data:`jitbench.faults.FAULTS` (imports torch),
    ordered by family then name."""
    from jitbench.faults import FAULTS
    from jitbench.faults.base import FAMILIES

    order = sorted(FAULTS.items(), key=lambda kv: (FAMILIES.index(kv[1].family), kv[0]))
    return [{"name": n, "family": c.family, "point": c.point, "recoverable": c.recoverable,
             "fails_job": c.fails_job, "summary": c.summary,
             "params": {k: {"type": p.type.__name__, "default": p.default, "doc": p.doc}
                        for k, p in c.all_params().items()}}
            for n, c in order]


def _write() -> None:
    """Rewrite :data:`ROWS` at the end of this file from :func:`live_rows`."""
    path = Path(__file__)
    text = path.read_text()
    head = text[:text.rindex("\nROWS: list[dict] = ") + 1]
    rows = pformat(live_rows(), width=96, sort_dicts=False)
    path.write_text(f"{head}ROWS: list[dict] = {rows}\n")


if __name__ == "__main__":
    _write()

ROWS: list[dict] = [{'name': 'exception',
  'family': 'process',
  'point': 'step',
  'recoverable': True,
  'fails_job': True,
  'summary': 'a Python exception raised inside step k of one rank (a bug, a bad batch)',
  'params': {'at': {'type': 'str',
                    'default': None,
                    'doc': 'injection point: step, collective, micro:M, restore (default '
                           'step)'}}},
 {'name': 'exit',
  'family': 'process',
  'point': 'collective',
  'recoverable': True,
  'fails_job': True,
  'summary': 'one rank calls exit(code) at step k, no handlers run (library abort)',
  'params': {'code': {'type': 'int', 'default': 1, 'doc': 'exit status of the process'},
             'at': {'type': 'str',
                    'default': None,
                    'doc': 'injection point: step, collective, micro:M, write, restore '
                           '(default collective)'}}},
 {'name': 'kill',
  'family': 'process',
  'point': 'collective',
  'recoverable': True,
  'fails_job': True,
  'summary': 'SIGKILL one rank inside the gradient all-reduce of step k (GPU/host crash)',
  'params': {'at': {'type': 'str',
                    'default': None,
                    'doc': 'injection point: step, collective, micro:M, write, restore '
                           '(default collective)'}}},
 {'name': 'segfault',
  'family': 'process',
  'point': 'collective',
  'recoverable': True,
  'fails_job': True,
  'summary': 'real SIGSEGV (invalid memory read) in one rank at step k (native crash)',
  'params': {'at': {'type': 'str',
                    'default': None,
                    'doc': 'injection point: step, collective, micro:M, write, restore '
                           '(default collective)'}}},
 {'name': 'term',
  'family': 'process',
  'point': 'collective',
  'recoverable': True,
  'fails_job': True,
  'summary': 'SIGTERM one rank at step k, as in a preemption (it saves, then exits)',
  'params': {'at': {'type': 'str',
                    'default': None,
                    'doc': 'injection point: step, collective, micro:M, write, restore '
                           '(default collective)'}}},
 {'name': 'desync',
  'family': 'collective',
  'point': 'collective',
  'recoverable': True,
  'fails_job': True,
  'summary': 'one rank posts an unmatched (extra) or wrong-sized collective at step k (field '
             'case C1)',
  'params': {'mode': {'type': 'str',
                      'default': 'extra',
                      'doc': "extra: an all-reduce nobody else posts; size: the peers' "
                             'collective with one element fewer'},
             'numel': {'type': 'int',
                       'default': 7,
                       'doc': 'elements of the extra all-reduce (mode extra)'},
             'at': {'type': 'str',
                    'default': None,
                    'doc': 'injection point: step, collective, micro:M (default collective)'}}},
 {'name': 'nccl-hang',
  'family': 'collective',
  'point': 'collective',
  'recoverable': True,
  'fails_job': True,
  'summary': 'one rank blocks forever inside the gradient all-reduce of step k (hung '
             'kernel/link)',
  'params': {'at': {'type': 'str',
                    'default': None,
                    'doc': 'injection point: step, collective, micro:M (default collective)'}}},
 {'name': 'nccl-timeout',
  'family': 'collective',
  'point': 'collective',
  'recoverable': True,
  'fails_job': True,
  'summary': "one rank arrives late at the gradient collective of step k; every rank's "
             'collective times out (an error, not a hang)',
  'params': {'timeout_s': {'type': 'float',
                           'default': 1.0,
                           'doc': 'per-operation timeout of that collective on every rank (s)'},
             'delay_s': {'type': 'float',
                         'default': None,
                         'doc': 'how late the rank arrives (s); default 2 x timeout_s'},
             'at': {'type': 'str',
                    'default': None,
                    'doc': 'injection point: step, collective, micro:M (default collective)'}}},
 {'name': 'slow',
  'family': 'collective',
  'point': 'step',
  'recoverable': True,
  'fails_job': False,
  'summary': 'one rank is delayed delay_s per step for `steps` steps from step k (straggler)',
  'params': {'delay_s': {'type': 'float',
                         'default': 0.5,
                         'doc': 'delay added to each slowed step (s)'},
             'steps': {'type': 'int', 'default': 5, 'doc': 'number of slowed steps'},
             'at': {'type': 'str',
                    'default': None,
                    'doc': 'injection point: step, collective, micro:M (default step)'}}},
 {'name': 'xid',
  'family': 'gpu',
  'point': 'step',
  'recoverable': True,
  'fails_job': True,
  'summary': 'a GPU Xid error (--xid CODE, default 79) through the health probe; fatal: the '
             'rank leaves, peers are told and save at once',
  'params': {'code': {'type': 'int',
                      'default': 79,
                      'doc': 'Xid code (see jitbench.faults.xid.XID_TABLE)'},
             'at': {'type': 'str',
                    'default': None,
                    'doc': 'injection point: step, collective, micro:M (default step)'}}},
 {'name': 'corrupt',
  'family': 'storage',
  'point': 'step',
  'recoverable': True,
  'fails_job': False,
  'summary': 'flip bytes in the newest committed checkpoint at step k; restore falls back to '
             'the newest valid one',
  'params': {'nbytes': {'type': 'int', 'default': 64, 'doc': 'bytes flipped per part'}}},
 {'name': 'eio',
  'family': 'storage',
  'point': 'write',
  'recoverable': True,
  'fails_job': True,
  'summary': 'the next checkpoint write from step k fails with EIO (at fsync by default)',
  'params': {'op': {'type': 'str', 'default': 'fsync', 'doc': 'operation that fails'},
             'at_frac': {'type': 'float',
                         'default': 0.5,
                         'doc': 'fraction of the file written when a write fails (op write)'}}},
 {'name': 'enospc',
  'family': 'storage',
  'point': 'write',
  'recoverable': True,
  'fails_job': True,
  'summary': 'checkpoint filesystem full from step k (room_ckpts parts of room): the write '
             'fails with ENOSPC (C11)',
  'params': {'room_ckpts': {'type': 'float',
                            'default': 0.5,
                            'doc': 'free space when armed, in sizes of the first part written '
                                   '(e.g. 1.5)'}}},
 {'name': 'torn-write',
  'family': 'storage',
  'point': 'write',
  'recoverable': True,
  'fails_job': True,
  'summary': 'SIGKILL the writing rank at a (seeded) random instant inside its next checkpoint '
             'write from step k (C2)',
  'params': {'frac': {'type': 'float',
                      'default': None,
                      'doc': "instant as a fraction of the commit's I/O operations; default "
                             'drawn from the seed'}}}]
