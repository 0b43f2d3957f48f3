"""The garbage collector of the Spark Python workers that run the pipeline's tasks.

PySpark's daemon runs a full ``gc.collect()`` in a reused Python worker after every task
(``pyspark/daemon.py``, the loop that hands the worker its next task). A worker that has run one
of our tasks holds pyspark's, pyarrow's and storagecore's modules: about 51,000 objects that
every full collection walks again, 10-30 ms of CPU per task on this kind of machine (measured
in a compact task: ``gc.collect()`` 27-30 ms under load, 0.01 ms once they are frozen). For
``compact`` that collection lands at the end of the job on every slot at once (one worker per
core), exactly while the JVM finishes the job and the driver swaps the cleaned segments in:
on two cores, local[2] lost it whole, local[1] had a core to spare.

:func:`freeze_long_lived` moves what the worker holds when one of our tasks starts into the
collector's permanent generation (``gc.freeze()``), once per worker process: the collections
after each task then walk only what later tasks made. Why once and not per task: an object
frozen is never collected, and each task start carries a few short-lived cycles of PySpark's
own (the task's context and function); freezing once leaks those of one task at most. Called
only on executors, first thing in a task's function; never on the driver (a user's process).
"""

from __future__ import annotations

import gc
import os

#: The process whose heap was frozen (a forked child inherits the flag; it checks its pid).
_frozen_in_pid: int | None = None


def freeze_long_lived() -> bool:
    """Freeze the worker's objects once per process; True when this call froze them."""
    global _frozen_in_pid
    pid = os.getpid()
    if _frozen_in_pid == pid:
        return False
    gc.freeze()
    _frozen_in_pid = pid
    return True
