#!/usr/bin/env python3
"""Chaos runs of ft_agree (issue 07): SIGKILL one or two random ranks at random times.

Each run starts `ferry run -n N --keep-going --backend B ft_agree ROUNDS` and SIGKILLs K random
ranks, each at its own random time within the first 80 % of the run's expected length (rank 0
is among the victims of every other run with K >= 2, and by chance otherwise; the time counts
from when every rank has made its communicator, as a death during start-up is not one the
communicator can survive: the ranks run with FERRY_LOG=ferry_ft=info). It checks:
- no hang (the run ends within --timeout seconds);
- every survivor printed one `done` line and all are identical after the `rank W:` prefix;
- every survivor printed the same `shrink` lines (same generations, same lists);
- no survivor is named by the launcher as failed (survivors exit 0);
- no process of the job and no /dev/shm object of the job is left afterwards.
It reports runs, hangs, disagreements, failures, leftovers, and the time from each kill to
the last survivor's shrink line that excludes the killed rank (median and max).

Usage: bench/chaos.py [--backends tcp,shm,hybrid] [--ranks 4,8] [--kills 1,2] [--runs 20]
                      [--rounds 2000] [--timeout 60] [--seed S] [--target target/release]
Exit status 0 when every run passed.
"""

import argparse
import os
import random
import re
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from chaoslib import Job, blamed_survivors, hybrid_wrapper, median_max_ms  # noqa: E402

SHRINK = re.compile(r"^rank (\d+): shrink (\d+): failed \[([\d, ]*)\] survivors \[([\d, ]*)\]$")
DONE = re.compile(r"^rank (\d+): done (\d+) rounds, size (\d+), checksum (-?\d+)$")


def one_run(args, backend, n, kills, rng, run_index):
    cmd = [os.path.join(args.target, "ferry"), "run", "-n", str(n), "--keep-going",
           "--backend", backend]
    if backend == "hybrid":
        cmd += hybrid_wrapper(n)
    cmd += [os.path.join(args.target, "examples", "ft_agree"), str(args.rounds)]
    job = Job(cmd, dict(os.environ, FERRY_LOG="ferry_ft=info"))
    job.wait_ranks(n)
    # Kill times count from when every rank has made its communicator (its
    # `ft: communicator ready` log line): a rank killed during ferry::init is a start-up
    # failure, which the fault-tolerant communicator (made after init) cannot survive.
    job.wait_until(lambda: sum("ft: communicator ready" in line
                               for _, line in list(job.err)) >= n, 20)
    victims = rng.sample(range(n), kills)
    if kills >= 2 and run_index % 2 == 0 and 0 not in victims:
        victims[0] = 0
    # The run lasts about rounds * ~1.2 ms plus start-up; kill within the first 80 %.
    span = args.rounds * 0.0012 * 0.8
    at = sorted(rng.uniform(0.05, span) for _ in victims)
    kill_times = job.kill_at(victims, at)
    job.finish(args.timeout)
    err = job.err_lines()
    # Verdicts.
    done_by, shrink_by = {}, {}
    for t, line in job.out:
        m = DONE.match(line)
        if m:
            done_by[int(m.group(1))] = line.split(":", 1)[1]
            continue
        m = SHRINK.match(line)
        if m:
            shrink_by.setdefault(int(m.group(1)), []).append((t, line.split(":", 1)[1], m))
    killed = set(kill_times)
    survivors = [r for r in range(n) if r not in killed]
    problems = []
    if job.hang:
        problems.append("hang")
    missing = [r for r in survivors if r not in done_by]
    if missing and not job.hang:
        problems.append(f"no done line from {missing}")
    if len({done_by[r] for r in survivors if r in done_by}) > 1:
        problems.append("done lines differ")
    shrink_sets = {tuple(s for _, s, _ in shrink_by.get(r, [])) for r in survivors}
    if len(shrink_sets) > 1:
        problems.append("shrink lines differ")
    blamed = blamed_survivors(err)
    if blamed:
        problems.append("survivor failed: " + "; ".join(blamed))
    errors = [l for l in err if l.startswith("ft_agree: error")]
    if errors:
        problems.append("; ".join(errors[:2]))
    leftovers = job.leftovers()
    problems += leftovers
    # Time from each kill to the last survivor's shrink line that no longer lists the victim.
    notice = []
    for v, kt in kill_times.items():
        last = None
        for r in survivors:
            for t, _, m in shrink_by.get(r, []):
                if str(v) in [x.strip() for x in m.group(3).split(",")]:
                    last = t if last is None else max(last, t)
                    break
        if last is not None:
            notice.append(last - kt)
    return {
        "problems": problems, "hang": job.hang, "victims": victims, "notice": notice,
        "kill_at": [round(a, 3) for a in at],
        "disagree": any(p in ("done lines differ", "shrink lines differ") for p in problems),
        "leftovers": bool(leftovers), "elapsed": job.elapsed, "stderr": err,
    }


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--backends", default="tcp,shm,hybrid")
    ap.add_argument("--ranks", default="4,8")
    ap.add_argument("--kills", default="1,2")
    ap.add_argument("--runs", type=int, default=20, help="runs per backend, size and kill count")
    ap.add_argument("--rounds", type=int, default=2000)
    ap.add_argument("--timeout", type=float, default=60)
    ap.add_argument("--seed", type=int, default=None)
    ap.add_argument("--target", default="target/release")
    ap.add_argument("-v", "--verbose", action="store_true")
    args = ap.parse_args()
    seed = args.seed if args.seed is not None else random.randrange(1 << 30)
    rng = random.Random(seed)
    print(f"chaos: seed {seed}, {args.runs} runs each, ft_agree {args.rounds}")
    print("backend  ranks kills  runs  ok hangs disagree leftovers  kill->shrink median/max (ms)")
    all_ok = True
    for backend in args.backends.split(","):
        for n in map(int, args.ranks.split(",")):
            for k in map(int, args.kills.split(",")):
                res = [one_run(args, backend, n, k, rng, i) for i in range(args.runs)]
                ok = sum(1 for r in res if not r["problems"])
                hangs = sum(1 for r in res if r["hang"])
                dis = sum(1 for r in res if r["disagree"])
                left = sum(1 for r in res if r["leftovers"])
                notice = median_max_ms([x for r in res for x in r["notice"]])
                print(f"{backend:8} {n:5} {k:5} {len(res):5} {ok:3} {hangs:5} {dis:8} "
                      f"{left:9}  {notice}", flush=True)
                for r in res:
                    slow = [round(x * 1000) for x in r["notice"] if x > 1.0]
                    if slow:
                        print(f"  victims {r['victims']} at {r['kill_at']}: kill to shrink "
                              f"{slow} ms (over 1 s)")
                    if r["problems"]:
                        all_ok = False
                        print(f"  victims {r['victims']}: {' | '.join(r['problems'])}")
                        if args.verbose:
                            for line in r["stderr"][-15:]:
                                print(f"    {line}")
    return 0 if all_ok else 1


if __name__ == "__main__":
    sys.exit(main())
