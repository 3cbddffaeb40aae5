"""An elastic job from Python (run by run-tests.sh as `ferry run -n 2 --spares 1 ...`): the
spare waits in join_world, the resize point at phase 1 admits it, and the grown world sums
its members. Rank 0 prints one line that the script checks."""

import ferry

comm = ferry.init()
phase = comm.join_world()
if phase is None:
    # a spare the job never admitted
    comm.finish()
    raise SystemExit(0)
before = comm.allreduce(1) if phase == 0 else None
if phase == 0:
    changed = comm.allow_resize(1)
    assert changed is True, changed
    assert comm.previous_group.size == before
after = comm.allreduce(1)
if comm.rank == 0:
    print(f"world {before} -> {after}, epoch {comm.epoch}, members {comm.group.members}")
comm.finish()
