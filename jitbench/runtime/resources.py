"""What a process holds open, for the leak check of in-process recovery."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path


def resources() -> dict:
    """This process's threads and TCP sockets (Linux ``/proc``), counted at the end of
    training: a generation whose process group leaked would show in them.

    Returns:
        ``threads`` (tasks), ``thread_names`` (each task's ``comm``, sorted, and the
        Python threads' names: what tells a leaked thread from a transient one),
        ``tcp_established`` and ``tcp_listen`` (sockets this process holds open in
        that state), ``cpu_s`` (CPU time of the process so far, every thread, s:
        :func:`time.process_time`); only ``cpu_s`` off Linux.
    """
    try:
        tasks = os.listdir("/proc/self/task")
        threads = len(tasks)
        names = []
        for tid in tasks:
            try:
                names.append(Path(f"/proc/self/task/{tid}/comm").read_text().strip())
            except OSError:  # the task ended between the listing and the read
                names.append("?")
        inodes = set()
        for fd in os.listdir("/proc/self/fd"):
            try:
                target = os.readlink(f"/proc/self/fd/{fd}")
            except OSError:
                continue
            if target.startswith("socket:["):
                inodes.add(target[8:-1])
        counts = {"01": 0, "0A": 0}
        for table in ("/proc/self/net/tcp", "/proc/self/net/tcp6"):
            try:
                lines = Path(table).read_text().splitlines()[1:]
            except OSError:
                continue
            for line in lines:
                cols = line.split()
                if len(cols) > 9 and cols[9] in inodes and cols[3] in counts:
                    counts[cols[3]] += 1
    except OSError:
        return {"cpu_s": time.process_time()}
    return {"threads": threads, "thread_names": sorted(names),
            "python_threads": sorted(t.name for t in threading.enumerate()),
            "tcp_established": counts["01"], "tcp_listen": counts["0A"],
            "cpu_s": time.process_time()}
