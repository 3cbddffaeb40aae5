"""Run by run-tests.sh as `ferry run -n 2 --keep-going python3 peer_failure.py`: rank 1 dies
without a word while rank 0 waits for its message; rank 0 must get a FerryError naming
itself, the operation, the dead peer and the cause, and print it."""

import os
import sys

import numpy as np

import ferry

comm = ferry.init()
if comm.rank == 1:
    sys.stdout.flush()
    os._exit(3)
try:
    comm.recv(1, tag=1, buf=np.zeros(4))
except ferry.FerryError as e:
    print(f"caught kind={e.kind} rank={e.rank} peer={e.peer} op={e.op}: {e}", flush=True)
    comm.close()
    sys.exit(0)
print("no error although rank 1 died", flush=True)
sys.exit(1)
