"""ferry for Python: SPMD communication and data distribution over numpy arrays.

Run a script on four ranks with ``ferry run -n 4 python3 script.py``::

    import numpy as np
    import ferry

    comm = ferry.init()
    x = np.full(3, comm.rank, dtype=np.float64)
    comm.allreduce(x, op=ferry.SUM, out=x)   # in place, no copy
    comm.finish()

Buffers are C-contiguous numpy arrays of float64/32, int64/32/16/8 or uint64/32/16/8; ranks,
roots, sources and destinations are indices in the communicator. Errors of the library raise
``ferry.FerryError`` naming the rank, the operation and the cause.
"""

import atexit as _atexit
import weakref as _weakref

from ._ferry import (  # noqa: F401
    Comm,
    Container,
    FerryError,
    Group,
    Kvs,
    Partitioner,
    Partitioning,
    Space,
)
from ._ferry import init as _init

SUM = "sum"
PROD = "prod"
MIN = "min"
MAX = "max"

_live = _weakref.WeakSet()


def init():
    """Initialise ferry from the environment and return the world communicator.

    A process started alone is rank 0 of 1; under ``ferry run -n N`` each process gets its
    rank. A communicator the program did not finish is closed at interpreter exit: its
    transport shuts down without a last meeting of the members (after an exception on one
    rank the others may never get there).
    """
    comm = _init()
    _live.add(comm)
    return comm


@_atexit.register
def _finish_at_exit():
    for comm in list(_live):
        comm.close()


__all__ = [
    "Comm",
    "Container",
    "FerryError",
    "Group",
    "Kvs",
    "MAX",
    "MIN",
    "PROD",
    "Partitioner",
    "Partitioning",
    "SUM",
    "Space",
    "init",
]
