#!/usr/bin/env python3
"""Chaos runs of jac2d_ft (issue 08): data-level recovery after SIGKILLed ranks.

For each backend it first runs `ferry run -n N PROGRAM -s SIZE ITERS` undisturbed (the
reference), then RUNS runs with `--keep-going` in which K ranks are SIGKILLed at random
times within the first 80 % of the reference's length, counted from rank 0's first line (the
job has started; a kill during start-up is not a failure the communicator can survive). One
kill: any rank, rank 0 in every other run; two kills: a pair that are not buddies of each
other, i.e. not neighbours in the ring of 4, the second kill after the first. A run passes
when:
- it ends within --timeout seconds (no hang);
- no survivor exits non-zero (the launcher names only killed ranks);
- the last stdout line equals the reference's final line `Global value sum after ...`,
  and it is printed exactly once;
- every `Residuum` line is one of the reference's lines (repeats after a rollback allowed);
- no process of the job and no /dev/shm object of the job is left.
It reports runs, passes, hangs, wrong results, and the time from each kill to the last
survivor's `recovered` line on stderr (kill to running again; median and max).

With `--mode rebuild` the runs use `FERRY_FT_MODE=rebuild` and `ferry run --respawn K`
(default 2) instead of `--keep-going` (issue 08 must-show 2): the killed ranks are replaced,
the launcher must exit 0, every rank (the replacements too) reports each recovery, and the job
ends with 4 ranks; a second victim is looked up anew, so it may be a replacement. The column
`extra` counts replacements beyond the kills: ranks the survivors declared failed while they
were alive (false suspicions), which cost respawns.

PROGRAM is jac2d_ft (default; rows in plain vectors, `ferry::ft::Recoverable`) or, with
`--program jac2d_ft_data`, the same Jacobi on ferry-data containers (`Checkpoints`); the
latter also reports the bytes each rank holds for recovery after a recovery.

Usage: bench/chaos_recover.py [--backends tcp,shm,hybrid] [--kills 1,2] [--runs 20]
                              [--size 1000] [--iters 400] [--timeout 60] [--seed S]
                              [--target target/release] [--mode shrink|rebuild]
                              [--respawn K] [--program jac2d_ft|jac2d_ft_data]
                              [-v [--stacks]]
Exit status 0 when every run passed.
"""

import argparse
import os
import random
import re
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from chaoslib import Job, blamed_survivors, hybrid_wrapper, median_max_ms  # noqa: E402

N = 4
RECOVERED = re.compile(r"^jac2d_ft(?:_data)?: rank (\d+): recovered on generation (\d+)")
HELD = re.compile(r"(\d+) bytes held for recovery\)$")


def command(args, backend, keep_going):
    cmd = [os.path.join(args.target, "ferry"), "run", "-n", str(N), "--backend", backend]
    if args.mode == "rebuild":
        cmd += ["--respawn", str(args.respawn)]
    elif keep_going:
        cmd.append("--keep-going")
    if backend == "hybrid":
        cmd += hybrid_wrapper(N)
    cmd += [os.path.join(args.target, "examples", args.program), "-s", str(args.size),
            str(args.iters)]
    return cmd


def environment(args):
    env = dict(os.environ)
    env["FERRY_FT_MODE"] = args.mode
    return env


def reference(args, backend):
    start = time.monotonic()
    out = subprocess.run(command(args, backend, False), capture_output=True, text=True,
                         timeout=args.timeout, env=environment(args))
    took = time.monotonic() - start
    if out.returncode != 0:
        sys.exit(f"chaos_recover: undisturbed {backend} run failed:\n{out.stderr}")
    lines = out.stdout.splitlines()
    return lines, took


def victims_for(kills, rng, run_index):
    if kills == 1:
        return [0] if run_index % 2 == 0 else [rng.randrange(N)]
    # Pairs that are not neighbours in the buddy ring 0 -> 1 -> 2 -> 3 -> 0.
    pair = rng.choice([(0, 2), (1, 3)])
    return list(pair) if rng.random() < 0.5 else [pair[1], pair[0]]


def one_run(args, backend, kills, ref, span, rng, run_index):
    job = Job(command(args, backend, True), environment(args))
    pids = job.wait_ranks(N)
    # Kill times count from rank 0's first line, printed once the fault-tolerant communicator
    # exists: a rank killed while the job is still starting (ferry::init) is a start-up
    # failure, which the communicator cannot recover from (it does not exist yet).
    job.wait_until(lambda: bool(job.out), 20)
    victims = victims_for(kills, rng, run_index)
    at = sorted(rng.uniform(0.05, span * 0.8) for _ in victims)
    kill_times = job.kill_at(victims, at, fresh_pids=args.mode == "rebuild")

    def stacks():
        if not args.stacks:
            return
        for r, pid in sorted(pids.items()):
            if r in kill_times:
                continue
            bt = subprocess.run(["gdb", "-p", str(pid), "-batch", "-ex", "bt 40"],
                                capture_output=True, text=True, timeout=120).stdout
            frames = [l for l in bt.splitlines() if l.startswith("#")
                      and ("ferry" in l or "jac2d" in l)]
            job.err.append((time.monotonic(), f"stack of rank {r}:"))
            job.err.extend((time.monotonic(), "  " + f[:200]) for f in frames)

    job.finish(args.timeout, stacks)
    err = job.err_lines()
    problems = []
    if job.hang:
        problems.append("hang")
    final = ref[-1]
    stdout = job.out_lines()
    wrong = False
    finals = [line for line in stdout if line.startswith("Global value sum")]
    if not job.hang and finals != [final]:
        wrong = True
        problems.append(f"final lines {finals}, expected [{final!r}]")
    if not job.hang and (not stdout or stdout[-1] != final):
        wrong = True
        problems.append("the final line is not last")
    allowed = set(ref)
    foreign = [line for line in stdout if line.startswith("Residuum") and line not in allowed]
    if foreign:
        wrong = True
        problems.append(f"residuum lines not in the undisturbed run: {foreign[:3]}")
    problems += blamed_survivors(err)
    problems += [line for line in err if line.startswith(f"{args.program}: error")]
    if args.mode == "rebuild" and not job.hang and job.p.returncode != 0:
        problems.append(f"the launcher exited {job.p.returncode}")
    problems += job.leftovers()
    # Kill to running again: the last survivor's first `recovered` line after each kill.
    survivors = ([r for r in range(N) if r not in kill_times] if args.mode == "shrink"
                 else list(range(N)))
    notice = []
    for kt in sorted(kill_times.values()):
        first = {}
        for t, line in job.err:
            m = RECOVERED.match(line)
            if m and t >= kt and int(m.group(1)) in survivors:
                first.setdefault(int(m.group(1)), t)
        if first and len(first) == len(survivors):
            notice.append(max(first.values()) - kt)
    recoveries = len({int(RECOVERED.match(l).group(2)) for l in err if RECOVERED.match(l)})
    respawns = sum("started a replacement" in line for line in err)
    held = [int(m.group(1)) for m in (HELD.search(l) for l in err if RECOVERED.match(l)) if m]
    return {"problems": problems, "hang": job.hang, "wrong": wrong, "victims": victims,
            "killed": sorted(kill_times), "notice": notice, "recoveries": recoveries,
            "extra": max(0, respawns - len(kill_times)), "held": held, "stderr": err}


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--backends", default="tcp,shm,hybrid")
    ap.add_argument("--kills", default="1,2")
    ap.add_argument("--runs", type=int, default=20, help="runs per backend and kill count")
    ap.add_argument("--size", type=int, default=1000)
    ap.add_argument("--iters", type=int, default=400)
    ap.add_argument("--timeout", type=float, default=60)
    ap.add_argument("--seed", type=int, default=None)
    ap.add_argument("--target", default="target/release")
    ap.add_argument("--mode", choices=["shrink", "rebuild"], default="shrink")
    ap.add_argument("--respawn", type=int, default=2, help="--respawn K in rebuild mode")
    ap.add_argument("--program", choices=["jac2d_ft", "jac2d_ft_data"], default="jac2d_ft")
    ap.add_argument("-v", "--verbose", action="store_true")
    ap.add_argument("--stacks", action="store_true",
                    help="on a hang, print the survivors' stacks (gdb) with --verbose")
    args = ap.parse_args()
    seed = args.seed if args.seed is not None else random.randrange(1 << 30)
    rng = random.Random(seed)
    print(f"chaos_recover: seed {seed}, {args.runs} runs each, "
          f"{args.program} -s {args.size} {args.iters} on {N} ranks, mode {args.mode}"
          + (f", --respawn {args.respawn}" if args.mode == "rebuild" else ""))
    print("backend  kills  runs  ok hangs wrong  recovered extra  kill->running median/max (ms)"
          "  held (bytes/rank)")
    all_ok = True
    for backend in args.backends.split(","):
        ref, took = reference(args, backend)
        for k in map(int, args.kills.split(",")):
            res = [one_run(args, backend, k, ref, took, rng, i) for i in range(args.runs)]
            ok = sum(1 for r in res if not r["problems"])
            hangs = sum(1 for r in res if r["hang"])
            wrong = sum(1 for r in res if r["wrong"])
            rec = sum(1 for r in res if r["recoveries"] > 0)
            extra = sum(r["extra"] for r in res)
            notice = median_max_ms([x for r in res for x in r["notice"]])
            held = sorted({h for r in res for h in r["held"]})
            held = "-" if not held else f"{held[0]}" + (f"-{held[-1]}" if len(held) > 1 else "")
            print(f"{backend:8} {k:5} {len(res):5} {ok:3} {hangs:5} {wrong:5} {rec:10} "
                  f"{extra:5}  {notice:>29}  {held}", flush=True)
            for r in res:
                if r["problems"]:
                    all_ok = False
                    print(f"  victims {r['victims']} killed {r['killed']}: "
                          f"{' | '.join(r['problems'])}")
                    if args.verbose:
                        for line in r["stderr"][-60:]:
                            print(f"    {line}")
    return 0 if all_ok else 1


if __name__ == "__main__":
    sys.exit(main())
