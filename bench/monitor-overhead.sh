#!/usr/bin/env bash
# Cost of communication monitoring (P5): jac2d, jac3d and markov2 on 4 ranks unmonitored (off),
# with FERRY_MONITOR=record:DIR and with FERRY_MONITOR=check:DIR (against a recording made
# first), measured so that a loaded machine's noise cannot pass for a cost or hide one:
#
# - runs come in rounds; a round runs every example once in every mode, back to back, the
#   modes' order rotated from round to round so that none always runs first;
# - the figure is per round: the ratio of a monitored run to the unmonitored run of the same
#   round (a change of load between rounds cancels out), and over the rounds the median of
#   those ratios with a 95 % bootstrap confidence interval;
# - beside wall time, CPU time (user + system of the launcher and all ranks, from wait4's
#   rusage), which the other programs on the machine disturb far less than wall time.
#
# Usage: bench/monitor-overhead.sh [ROUNDS]  (from the repository root; default 30)
# Needs: cargo build --release -p ferry-cli -p ferry --examples
# Env:   BACKEND=shm  RANKS=4  MINUTES=0 (> 0: start no round after that many minutes)
#        EXAMPLES="jac2d jac3d markov2" (a subset to measure again)
#        OUT=file (Markdown table, default stdout)  RAW=file (every run, tab-separated)
#        FERRY=path/to/ferry  EX=dir/of/examples
#
# The expected cost to compare with comes from the monitor alone (no noise):
#   cargo bench -p ferry-monitor --bench overhead
set -u
cd "$(dirname "$0")/.." || exit 1
ROUNDS=${1:-30} exec python3 - <<'EOF'
import os, random, shutil, subprocess, sys, tempfile, time

rounds = int(os.environ["ROUNDS"])
backend = os.environ.get("BACKEND", "shm")
ranks = os.environ.get("RANKS", "4")
minutes = float(os.environ.get("MINUTES", "0"))
ferry = os.environ.get("FERRY", "target/release/ferry")
ex = os.environ.get("EX", "target/release/examples")
# The stencils of bench/examples.sh's evaluation lines; markov2 with more states and
# iterations than there (400 states run in 20 ms, all start-up) so that a run lasts seconds
# and the start-up (and the check's reading of the recording) is a small part of it.
cases = [["jac2d", "5000"], ["jac3d", "250"], ["markov2", "200000", "10", "1000"]]
cases = [c for c in cases if c[0] in os.environ.get("EXAMPLES", "jac2d jac3d markov2").split()]
modes = ["off", "record", "check"]

for f in [ferry] + [os.path.join(ex, c[0]) for c in cases]:
    if not os.access(f, os.X_OK):
        sys.exit(f"missing {f}: run cargo build --release -p ferry-cli -p ferry --examples")

work = tempfile.mkdtemp(prefix="ferry-bench-monitor.")


def run(case, monitor):
    """One job: (wall s, cpu s) or exit with its error."""
    env = dict(os.environ)
    env.pop("FERRY_MONITOR", None)
    if monitor:
        env["FERRY_MONITOR"] = monitor
    argv = [ferry, "run", "-n", ranks, "--backend", backend,
            os.path.join(ex, case[0])] + case[1:]
    with open(os.path.join(work, "err"), "w+b") as err:
        t0 = time.perf_counter()
        p = subprocess.Popen(argv, env=env, stdin=subprocess.DEVNULL,
                             stdout=subprocess.DEVNULL, stderr=err)
        # wait4: the rusage of this job alone (the launcher and the ranks it waited for).
        _, status, ru = os.wait4(p.pid, 0)
        wall = time.perf_counter() - t0
        p.returncode = os.waitstatus_to_exitcode(status)
        if p.returncode != 0:
            err.seek(0)
            sys.stderr.write(err.read().decode(errors="replace")[:2000])
            shutil.rmtree(work, ignore_errors=True)
            sys.exit(f"{' '.join(case)} ({monitor or 'off'}) failed with {p.returncode}")
    return wall, ru.ru_utime + ru.ru_stime


def messages_per_rank(ref):
    """The most messages one rank completed in the recording (`ferry monitor show`)."""
    out = subprocess.run([ferry, "monitor", "show", ref], capture_output=True, text=True).stdout
    most = 0
    for line in out.splitlines():
        if line.startswith("rank ") and "sent" in line:
            # rank R: C calls in T s, sent A msgs / ..., received B msgs / ...
            parts = line.replace(",", "").split()
            n = [int(parts[i - 1]) for i, w in enumerate(parts) if w == "msgs"]
            most = max(most, sum(n))
    return most


refs, msgs = {}, {}
for c in cases:
    refs[c[0]] = os.path.join(work, "ref-" + c[0])
    run(c, "record:" + refs[c[0]])
    msgs[c[0]] = messages_per_rank(refs[c[0]])

load_before = open("/proc/loadavg").read().split()[:3]
raw = []  # (round, case, mode, wall, cpu)
began = time.monotonic()
done = 0
for r in range(rounds):
    if minutes > 0 and time.monotonic() - began > minutes * 60:
        break
    order = modes[r % 3:] + modes[:r % 3]
    for c in cases:
        for m in order:
            rec = os.path.join(work, "rec")
            shutil.rmtree(rec, ignore_errors=True)
            monitor = {"off": "", "record": "record:" + rec,
                       "check": "check:" + refs[c[0]] + ",react=abort"}[m]
            wall, cpu = run(c, monitor)
            raw.append((r, c[0], m, wall, cpu))
    done = r + 1
    last = [x for x in raw if x[0] == r]
    print(f"round {done}: " + "  ".join(f"{x[1]} {x[2]} {x[3]:.2f}/{x[4]:.2f}" for x in last),
          file=sys.stderr)
load_after = open("/proc/loadavg").read().split()[:3]
shutil.rmtree(work, ignore_errors=True)

if os.environ.get("RAW"):
    with open(os.environ["RAW"], "w") as f:
        f.write("round\texample\tmode\twall_s\tcpu_s\n")
        for x in raw:
            f.write(f"{x[0]}\t{x[1]}\t{x[2]}\t{x[3]:.4f}\t{x[4]:.4f}\n")


def median(v):
    v = sorted(v)
    n = len(v)
    return v[n // 2] if n % 2 else (v[n // 2 - 1] + v[n // 2]) / 2


def ci(v, rng, reps=10000):
    """95 % percentile-bootstrap interval of the median of v."""
    meds = sorted(median(rng.choices(v, k=len(v))) for _ in range(reps))
    return meds[int(0.025 * reps)], meds[int(0.975 * reps) - 1]


def pct(x):
    return f"{100 * (x - 1):+.2f} %"


rng = random.Random(9)  # a fixed seed: the same data give the same table
lines = [
    f"| example ({ranks} ranks, {backend}) | msgs/rank | off wall (s) | spread of off | "
    "record/off wall | check/off wall | off CPU (s) | record/off CPU | check/off CPU |",
    "|---|---|---|---|---|---|---|---|---|",
]
for c in cases:
    name = c[0]
    per = {}
    for x in raw:
        if x[1] == name:
            per.setdefault(x[0], {})[x[2]] = (x[3], x[4])
    offs_w = [p["off"][0] for p in per.values()]
    offs_c = [p["off"][1] for p in per.values()]
    cells = []
    for k in (0, 1):
        for m in ("record", "check"):
            ratios = [p[m][k] / p["off"][k] for p in per.values()]
            lo, hi = ci(ratios, rng)
            cells.append(f"{pct(median(ratios))} [{pct(lo)}, {pct(hi)}]")
    spread = (max(offs_w) - min(offs_w)) / median(offs_w)
    lines.append(
        f"| {' '.join(c)} | {msgs[name]} | {median(offs_w):.3f} | {100 * spread:.0f} % | "
        f"{cells[0]} | {cells[1]} | {median(offs_c):.3f} | {cells[2]} | {cells[3]} |")
lines += [
    "",
    f"{done} rounds; per round and example one run in each mode, back to back, order rotated.",
    "Each ratio: median over the rounds of (monitored run / unmonitored run of the same round),",
    "as a change in per cent, with its 95 % bootstrap confidence interval in brackets.",
    "CPU = user + system time of the launcher and all ranks. "
    f"Load average before: {' '.join(load_before)}, after: {' '.join(load_after)}.",
]
out = os.environ.get("OUT")
text = "\n".join(lines) + "\n"
if out:
    open(out, "w").write(text)
else:
    sys.stdout.write(text)
EOF
