"""What the chaos scripts (bench/chaos.py, bench/chaos_recover.py) share: starting a job
through the launcher with its output collected line by line and timestamped, finding its rank
processes, SIGKILLing victims at given times, ending a hung job, and checking that nothing of
the job is left (processes, /dev/shm objects)."""

import os
import re
import signal
import statistics
import subprocess
import threading
import time


def rank_pids(launcher_pid):
    """World rank -> pid of the launcher's children (their FERRY_RANK)."""
    pids = {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/stat") as f:
                stat = f.read()
            ppid = int(stat.rsplit(")", 1)[1].split()[1])
            if ppid != launcher_pid:
                continue
            with open(f"/proc/{d}/environ", "rb") as f:
                env = f.read().split(b"\0")
        except (OSError, ValueError, IndexError):
            continue
        for kv in env:
            if kv.startswith(b"FERRY_RANK="):
                pids[int(kv[11:])] = int(d)
    return pids


def shm_objects():
    try:
        return {n for n in os.listdir("/dev/shm") if "ferry" in n}
    except OSError:
        return set()


def job_objects(names, launcher_pid):
    """The names among `names` that the job of launcher `launcher_pid` made: the launcher
    names its job `f<pid>-<hex>` and segment names carry `-j<job>`. Other jobs on the machine
    (other users' tests) make names of their own during a run; they are not this job's."""
    return {n for n in names if f"-jf{launcher_pid}-" in n}


def alive(pid):
    """Whether process `pid` exists and is not a zombie."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


def hybrid_wrapper(n):
    """Words that make two "nodes" of one host for the hybrid backend: deaths are seen
    through shm by node mates, through tcp by the others."""
    half = max(1, n // 2)
    return ["--", "sh", "-c", f'FERRY_NODE=n$((FERRY_RANK / {half})) exec "$0" "$@"']


def blamed_survivors(err_lines):
    """Launcher lines that name a rank which exited with an error code (not a kill)."""
    return [l for l in err_lines if re.match(r"^ferry: ranks? ([\d,\-]+) exited with code", l)]


def median_max_ms(seconds):
    """`median/max` in milliseconds of a list of seconds, `-/-` when empty."""
    ms = [x * 1000 for x in seconds]
    if not ms:
        return "-/-"
    return f"{statistics.median(ms):.0f}/{max(ms):.0f}"


class Job:
    """A job started through the launcher in its own session, its stdout and stderr read
    into lists of (time, line) while it runs."""

    def __init__(self, cmd, env):
        self.shm_before = shm_objects()
        self.start = time.monotonic()
        self.p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                  text=True, start_new_session=True, env=env)
        self.out, self.err = [], []
        self.seen_pids = {}
        self.hang = False

        def read(stream, into):
            for line in stream:
                into.append((time.monotonic(), line.rstrip("\n")))

        self.threads = [threading.Thread(target=read, args=(self.p.stdout, self.out)),
                        threading.Thread(target=read, args=(self.p.stderr, self.err))]
        for t in self.threads:
            t.start()

    def pids(self):
        """The ranks' current pids (a replacement has a new one); remembered for the
        leftover check."""
        pids = rank_pids(self.p.pid)
        self.seen_pids.update({(r, pid): pid for r, pid in pids.items()})
        return pids

    def wait_ranks(self, n, within=10):
        """The pids of the `n` ranks once all run (fewer after `within` seconds)."""
        pids = {}
        while time.monotonic() - self.start < within:
            pids = self.pids()
            if len(pids) == n:
                break
            time.sleep(0.01)
        return pids

    def wait_until(self, ready, within):
        """Waits until `ready()` holds, the job ended or `within` seconds since the start."""
        while time.monotonic() - self.start < within and self.p.poll() is None:
            if ready():
                return True
            time.sleep(0.002)
        return False

    def kill_at(self, victims, at, fresh_pids=False):
        """SIGKILLs `victims[i]` at `at[i]` seconds from now (sorted); with `fresh_pids` the
        victims' pids are looked up at each kill (replacements). Returns {rank: kill time}."""
        t0 = time.monotonic()
        pids = self.pids()
        kill_times = {}
        for v, a in zip(victims, at):
            delay = t0 + a - time.monotonic()
            if delay > 0:
                time.sleep(delay)
            if fresh_pids:
                pids = self.pids()
            pid = pids.get(v)
            if pid is None:
                continue
            try:
                os.kill(pid, signal.SIGKILL)
                kill_times[v] = time.monotonic()
            except ProcessLookupError:
                pass
        return kill_times

    def finish(self, timeout, on_hang=None):
        """Waits for the end; a job still running after `timeout` seconds is a hang: `on_hang`
        runs, then the whole session is killed."""
        try:
            self.p.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.hang = True
            if on_hang:
                on_hang()
            os.killpg(self.p.pid, signal.SIGKILL)
            self.p.wait()
        for t in self.threads:
            t.join()
        self.elapsed = time.monotonic() - self.start

    def leftovers(self):
        """Problems for what the job left: rank processes, /dev/shm objects."""
        time.sleep(0.05)
        procs = sorted({r for (r, _), pid in self.seen_pids.items() if alive(pid)})
        shm = job_objects(shm_objects() - self.shm_before, self.p.pid)
        problems = []
        if procs:
            problems.append(f"leftover ranks {procs}")
        if shm:
            problems.append(f"leftover /dev/shm {sorted(shm)}")
        return problems

    def err_lines(self):
        return [line for _, line in self.err]

    def out_lines(self):
        return [line for _, line in self.out]
