#!/usr/bin/env python3
"""Chaos runs of jac2d_ft (issue 08): data-level recovery after SIGKILLed ranks.

For each backend it first runs `ferry run -n N jac2d_ft -s SIZE ITERS` undisturbed (the
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

With `--mode rebuild` the runs use `FERRY_FT_MODE=rebuild` and `ferry run --respawn 2`
instead of `--keep-going` (issue 08 must-show 2): the killed ranks are replaced, the launcher
must exit 0, every rank (the replacements too) reports each recovery, and the job ends with
4 ranks; a second victim is looked up anew, so it may be a replacement.

Usage: bench/chaos_recover.py [--backends tcp,shm,hybrid] [--kills 1,2] [--runs 20]
                              [--size 1000] [--iters 400] [--timeout 60] [--seed S]
                              [--target target/release] [--mode shrink|rebuild]
                              [-v [--stacks]]
Exit status 0 when every run passed.
"""

import argparse
import os
import random
import re
import signal
import statistics
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from chaos import job_objects, rank_pids, shm_objects  # noqa: E402

N = 4
RECOVERED = re.compile(r"^jac2d_ft: rank (\d+): recovered on generation (\d+)")


def command(args, backend, keep_going):
    cmd = [os.path.join(args.target, "ferry"), "run", "-n", str(N), "--backend", backend]
    if args.mode == "rebuild":
        cmd += ["--respawn", "2"]
    elif keep_going:
        cmd.append("--keep-going")
    if backend == "hybrid":
        # Two "nodes" on this host: deaths are seen through shm by node mates, tcp by others.
        cmd += ["--", "sh", "-c", f'FERRY_NODE=n$((FERRY_RANK / {N // 2})) exec "$0" "$@"']
    cmd += [os.path.join(args.target, "examples", "jac2d_ft"), "-s", str(args.size),
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
    shm_before = shm_objects()
    start = time.monotonic()
    p = subprocess.Popen(command(args, backend, True), stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True, start_new_session=True,
                         env=environment(args))
    out, err = [], []

    def read(stream, into):
        for line in stream:
            into.append((time.monotonic(), line.rstrip("\n")))

    threads = [threading.Thread(target=read, args=(p.stdout, out)),
               threading.Thread(target=read, args=(p.stderr, err))]
    for t in threads:
        t.start()
    pids = {}
    while time.monotonic() - start < 10:
        pids = rank_pids(p.pid)
        if len(pids) == N:
            break
        time.sleep(0.01)
    # Kill times count from rank 0's first line, printed once the fault-tolerant communicator
    # exists: a rank killed while the job is still starting (ferry::init) is a start-up
    # failure, which the communicator cannot recover from (it does not exist yet).
    while time.monotonic() - start < 20 and not out and p.poll() is None:
        time.sleep(0.002)
    victims = victims_for(kills, rng, run_index)
    at = sorted(rng.uniform(0.05, span * 0.8) for _ in victims)
    t0 = time.monotonic()
    kill_times = {}
    seen_pids = dict(pids)
    for v, a in zip(victims, at):
        delay = t0 + a - time.monotonic()
        if delay > 0:
            time.sleep(delay)
        if args.mode == "rebuild":
            # A replacement has a new pid.
            pids = rank_pids(p.pid)
            seen_pids.update({(r, pid): pid for r, pid in pids.items()})
        pid = pids.get(v)
        if pid is None:
            continue
        try:
            os.kill(pid, signal.SIGKILL)
            kill_times[v] = time.monotonic()
        except ProcessLookupError:
            pass
    hang = False
    try:
        p.wait(timeout=args.timeout)
    except subprocess.TimeoutExpired:
        hang = True
        if args.stacks:
            for r, pid in sorted(pids.items()):
                if r in kill_times:
                    continue
                bt = subprocess.run(["gdb", "-p", str(pid), "-batch", "-ex", "bt 40"],
                                    capture_output=True, text=True, timeout=120).stdout
                frames = [l for l in bt.splitlines() if l.startswith("#")
                          and ("ferry" in l or "jac2d" in l)]
                err.append((time.monotonic(), f"stack of rank {r}:"))
                err.extend((time.monotonic(), "  " + f[:200]) for f in frames)
        os.killpg(p.pid, signal.SIGKILL)
        p.wait()
    for t in threads:
        t.join()
    time.sleep(0.05)
    left_procs = [r for r, pid in seen_pids.items() if os.path.exists(f"/proc/{pid}")
                  and open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[0] != "Z"]
    left_shm = job_objects(shm_objects() - shm_before, p.pid)
    problems = []
    if hang:
        problems.append("hang")
    final = ref[-1]
    stdout = [line for _, line in out]
    wrong = False
    finals = [line for line in stdout if line.startswith("Global value sum")]
    if not hang and finals != [final]:
        wrong = True
        problems.append(f"final lines {finals}, expected [{final!r}]")
    if not hang and (not stdout or stdout[-1] != final):
        wrong = True
        problems.append("the final line is not last")
    allowed = set(ref)
    foreign = [line for line in stdout if line.startswith("Residuum") and line not in allowed]
    if foreign:
        wrong = True
        problems.append(f"residuum lines not in the undisturbed run: {foreign[:3]}")
    for _, line in err:
        m = re.match(r"^ferry: ranks? ([\d,\-]+) exited with code", line)
        if m:
            problems.append(line)
        if line.startswith("jac2d_ft: error"):
            problems.append(line)
    if args.mode == "rebuild" and not hang and p.returncode != 0:
        problems.append(f"the launcher exited {p.returncode}")
    if left_procs:
        problems.append(f"leftover ranks {left_procs}")
    if left_shm:
        problems.append(f"leftover /dev/shm {sorted(left_shm)}")
    # Kill to running again: the last survivor's first `recovered` line after each kill.
    survivors = ([r for r in range(N) if r not in kill_times] if args.mode == "shrink"
                 else list(range(N)))
    notice = []
    for kt in sorted(kill_times.values()):
        first = {}
        for t, line in err:
            m = RECOVERED.match(line)
            if m and t >= kt and int(m.group(1)) in survivors:
                first.setdefault(int(m.group(1)), t)
        if first and len(first) == len(survivors):
            notice.append(max(first.values()) - kt)
    recoveries = len({int(RECOVERED.match(l).group(2)) for _, l in err if RECOVERED.match(l)})
    return {"problems": problems, "hang": hang, "wrong": wrong, "victims": victims,
            "killed": sorted(kill_times), "notice": notice, "recoveries": recoveries,
            "stderr": [line for _, line in err]}


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
    ap.add_argument("-v", "--verbose", action="store_true")
    ap.add_argument("--stacks", action="store_true",
                    help="on a hang, print the survivors' stacks (gdb) with --verbose")
    args = ap.parse_args()
    seed = args.seed if args.seed is not None else random.randrange(1 << 30)
    rng = random.Random(seed)
    print(f"chaos_recover: seed {seed}, {args.runs} runs each, "
          f"jac2d_ft -s {args.size} {args.iters} on {N} ranks, mode {args.mode}")
    print("backend  kills  runs  ok hangs wrong  recovered  kill->running median/max (ms)")
    all_ok = True
    for backend in args.backends.split(","):
        ref, took = reference(args, backend)
        for k in map(int, args.kills.split(",")):
            res = [one_run(args, backend, k, ref, took, rng, i) for i in range(args.runs)]
            ok = sum(1 for r in res if not r["problems"])
            hangs = sum(1 for r in res if r["hang"])
            wrong = sum(1 for r in res if r["wrong"])
            rec = sum(1 for r in res if r["recoveries"] > 0)
            notice = [x * 1000 for r in res for x in r["notice"]]
            med = f"{statistics.median(notice):.0f}" if notice else "-"
            mx = f"{max(notice):.0f}" if notice else "-"
            print(f"{backend:8} {k:5} {len(res):5} {ok:3} {hangs:5} {wrong:5} {rec:10}  "
                  f"{med}/{mx}", flush=True)
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
