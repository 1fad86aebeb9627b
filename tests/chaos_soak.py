#!/usr/bin/python3
"""Chaos soak: one training job of NODES x RANKS real worker processes and a coordinator with a
state folder, while a driver injects faults at random times from a seeded generator:

  kill_worker   SIGKILL of any worker (leaders included); the node's other ranks go on
                (failover), and a little later the whole node is started again (a rank cannot
                rejoin its node's running group alone)
  kill_coord    SIGKILL of the coordinator, started again on its state folder and ports
  pause_worker  SIGSTOP of a worker for 1 to 4 s, then SIGCONT
  cut_link      a node's link to the coordinator cut for 1 to 6 s (tests/testutil/tcp_proxy.py)
  stop_start    StopRun, then StartRun of the same spec and every worker started again
  slow_node     (with --round_seconds) every rank of a node let run only a half, a quarter or a
                tenth of each 100 ms for 2 to 6 s (SIGSTOP/SIGCONT), then at full speed again

With --overlap_steps the runs overlap their rounds with training; merges are not compared
across ranks (each rank keeps its own progress), but every rank still ends on the final model.
With --fragments P each round syncs one fragment of the model: after the sync at step s only
that step's fragment is compared (the others hold each rank's own progress), and every rank
still ends on the final model, whole. With --round_seconds S the runs are paced (round_seconds
S, round_grace_seconds S: docs/design.md, "Paced rounds") and nodes are slowed and sped up.

Invariants, checked after every fault and at the end: the coordinator always starts again;
a run's round never goes back, nor its global step but where the coordinator went on from a
saved model older than its record (a restart, or a node's checkpoint when no live node held
the model), to that model's step (status polled every 0.2 s; docs/design.md, "Persistence",
"Checkpoints"); a run stopped by
StopRun ends its workers; every rank of a node holds the same parameters after each of its
syncs, and two nodes whose syncs at the same step both succeeded (one round: nodes follow the
run's global step, but across a restore that lost rounds, when it came again) hold the same
parameters; no worker reports max_unsynced_steps +
local_sgd_steps steps or more trained alone;
the last run completes; every rank in it ends on FetchModel's final model, bit for bit, and
the saved model names FetchModel's round and global step, and its nodes' rendezvous folders are
gone, and so are those that killed ranks of earlier runs left; no process is left behind.

A run that completes before the last fault is followed by a new one (the faults go on). Prints
one line per fault and a summary; exits 1 naming the invariant that broke.

Usage: chaos_soak.py --bin BAZEL_BIN --work DIR [--faults 50] [--seed 1]
(BAZEL_BIN: where coordinator/coordinator, coordinator/localsgdctl and tests/testutil/dumping_worker are.)
"""
import argparse
import collections
import datetime
import fnmatch
import glob
import hashlib
import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
import urllib.request

TOKEN = "chaos-token"
LOCAL_SGD_STEPS = 4
CHUNK_BYTES = 65536  # the spec's chunk_bytes
# Seconds a worker has to take a run up (log " I run ") before it counts as one that started as
# the run ended, waiting for the next run (a worker joins and takes the run up in well under 1 s).
IDLE_GRACE = 10
SPEC = """model {{ builtin: "mlp" }}
dataset {{ synthetic_samples: 4096 }}
local_sgd_steps: 4
overlap_steps: {overlap_steps}
fragments: {fragments}
total_steps: {total_steps}
batch_size: 32
min_workers: 2
round_deadline_seconds: 5
chunk_bytes: {chunk_bytes}
min_shard_bytes: 0
optimizer {{ lr: 0.05 momentum: 0.9 }}
"""


class Violation(Exception):
    pass


class Soak:
    def __init__(self, args):
        self.args = args
        self.bin = args.bin
        self.work = args.work
        self.rng = random.Random(args.seed)
        self.start = time.time()
        os.makedirs(f"{self.work}/state", exist_ok=True)
        os.makedirs(f"{self.work}/logs", exist_ok=True)
        with open(f"{self.work}/token", "w") as f:
            f.write(TOKEN)
        with open(f"{self.work}/spec.textproto", "w") as f:
            f.write(SPEC.format(total_steps=args.total_steps, overlap_steps=args.overlap_steps,
                                fragments=args.fragments, chunk_bytes=CHUNK_BYTES))
            if args.round_seconds > 0:
                f.write(f"round_seconds: {args.round_seconds}\n"
                        f"round_grace_seconds: {args.round_seconds}\n")
        self.coord = None
        self.coord_starts = 0
        self.grpc = self.http = None
        self.proxies = {}
        self.workers = {}  # (node, rank) -> Popen
        self.incarnation = collections.Counter()  # node -> starts
        self.killed = set()  # pids we killed (their exit status does not count)
        self.all_procs = []
        self.ended_workers = {}
        self.names = {}  # pid -> log name
        self.runs = []  # run ids, in order
        self.stopped_runs = set()
        self.seen = {}  # run id -> (round, global step), the highest seen
        self.most_unsynced = 0  # the most steps trained alone a worker reported
        self.violations = []
        self.lock = threading.Lock()
        self.counts = collections.Counter()
        # The workers' dumps (a model copy per rank and sync: gigabytes per run) are read into
        # digests and deleted as the soak goes: path -> (size, sha256, the sha256 of each
        # fragment's values) of each post-sync file.
        self.digests = {}

    # ---- processes -------------------------------------------------------------------------
    def log(self, text):
        print(f"[{time.time() - self.start:7.1f} s] {text}", flush=True)

    def spawn(self, name, argv):
        out = open(f"{self.work}/logs/{name}.out", "ab")
        err = open(f"{self.work}/logs/{name}.err", "ab")
        proc = subprocess.Popen(argv, stdout=out, stderr=err, start_new_session=True)
        self.all_procs.append(proc)
        self.names[proc.pid] = name
        return proc

    def start_coordinator(self):
        self.coord_starts += 1
        name = f"coord-{self.coord_starts}"
        address = self.grpc or "127.0.0.1:0"
        http = self.http or "127.0.0.1:0"
        self.coord = self.spawn(name, [
            f"{self.bin}/coordinator/coordinator", f"--grpc_address={address}",
            f"--http_address={http}", f"--token_file={self.work}/token",
            f"--state_dir={self.work}/state", "--lease_timeout=5s", "--heartbeat_interval=1s"])
        deadline = time.time() + 60
        while time.time() < deadline:
            text = open(f"{self.work}/logs/{name}.out").read()
            if "http listening on" in text:
                self.grpc = re.search(r"^grpc listening on (\S+)", text, re.M).group(1)
                self.http = re.search(r"^http listening on (\S+)", text, re.M).group(1)
                return
            if self.coord.poll() is not None:
                break
            time.sleep(0.1)
        raise Violation(f"the coordinator did not start again (start {self.coord_starts}): "
                        + open(f"{self.work}/logs/{name}.err").read()[-2000:])

    def start_proxy(self, node):
        cut = f"{self.work}/cut-{node}"
        name = f"proxy-{node}"
        proxy = os.path.join(os.path.dirname(os.path.abspath(__file__)), "testutil",
                             "tcp_proxy.py")
        proc = self.spawn(name, ["/usr/bin/python3", proxy, self.grpc, cut])
        for _ in range(100):
            m = re.search(r"proxy listening on (\S+)",
                          open(f"{self.work}/logs/{name}.out").read())
            if m:
                self.proxies[node] = (proc, m.group(1), cut)
                return
            time.sleep(0.1)
        raise Violation("the proxy did not start")

    def start_node(self, node):
        self.incarnation[node] += 1
        inc = self.incarnation[node]
        run = self.runs[-1]
        dump = f"{self.work}/dump/{run}/node-{node}-i{inc}"
        os.makedirs(dump, exist_ok=True)
        for rank in range(self.args.ranks):
            self.workers[(node, rank)] = self.spawn(f"w-{run}-{node}-{rank}-i{inc}", [
                f"{self.bin}/tests/testutil/dumping_worker", f"--coordinator={self.proxies[node][1]}",
                f"--token_file={self.work}/token", f"--node_name=node-{node}",
                f"--node_rank={node}", f"--num_nodes={self.args.nodes}", f"--local_rank={rank}",
                f"--local_world_size={self.args.ranks}", f"--rendezvous_dir={self.work}/rdv",
                f"--dump_dir={dump}", f"--save_model={self.work}/model-{run}.pt",
                f"--checkpoint_dir={self.work}/checkpoints", "--log_every=100000",
                "--connect_timeout=3m"])

    def kill(self, proc, sig=signal.SIGKILL):
        if proc.poll() is None:
            self.killed.add(proc.pid)
            proc.send_signal(sig)
            proc.wait()

    def ctl(self, *argv):
        return subprocess.run([f"{self.bin}/coordinator/localsgdctl", f"--coordinator={self.grpc}",
                               f"--token_file={self.work}/token", *argv],
                              capture_output=True, text=True, timeout=60)

    def start_run(self):
        for _ in range(100):  # the coordinator may still be restoring
            result = self.ctl("start", f"--spec={self.work}/spec.textproto")
            if result.returncode == 0:
                break
            time.sleep(0.3)
        else:
            raise Violation(f"StartRun failed: {result.stderr}")
        status = self.status(wait=True)
        self.runs.append(status["run"]["run_id"])
        self.log(f"run {self.runs[-1]} started")
        for node in range(self.args.nodes):
            self.start_node(node)

    # ---- status ----------------------------------------------------------------------------
    def status(self, wait=False):
        deadline = time.time() + (60 if wait else 0)
        while True:
            try:
                with urllib.request.urlopen(f"http://{self.http}/status", timeout=5) as r:
                    return json.load(r)
            except OSError:
                if time.time() >= deadline:
                    if wait:
                        raise Violation("status did not answer within 60 s")
                    return None
                time.sleep(0.2)

    @staticmethod
    def restored_between(status, before, now):
        """Whether a restarted coordinator went on from a saved model older than its record
        (docs/design.md, "Persistence") as a round after `before` and at most `now`, at a
        global step at most now's: the one way the global step may go back."""
        for event in status.get("events", []):
            m = re.search(r"restored the global model of round (\d+) \(global step (\d+),.*"
                          r"were committed after it and their model is lost", event.get("text", ""))
            if (event.get("kind") == "model_restored" and m and before[0] < int(m.group(1)) <= now[0]
                    and int(m.group(2)) <= now[1]):
                return True
        return False

    def poll_status(self, stop):
        while not stop.is_set():
            status = self.status()
            if status is not None:
                run = status.get("run", {})
                run_id = run.get("run_id")
                if run_id:
                    now = (int(run.get("round", 0)), int(run.get("global_step", 0)))
                    with self.lock:
                        before = self.seen.get(run_id, (0, 0))
                        if now[0] < before[0] or (now[1] < before[1] and
                                                  not self.restored_between(status, before, now)):
                            self.violations.append(
                                f"run {run_id} went back: round/global step {before} -> {now}")
                        self.seen[run_id] = max(before, now)
                        self.check_unsynced(run, status.get("members", []))
            time.sleep(0.2)

    def check_unsynced(self, run, members):
        """No worker trained alone past the bound: it waits at the first round that fails
        once it has trained max_unsynced_steps since the last round it took, so it reports
        less than max_unsynced_steps + local_sgd_steps (a round's steps, and with fragments
        a move into the others' phase; docs/design.md, "Faults")."""
        bound = int(run.get("spec", {}).get("max_unsynced_steps", 0))
        for member in members:
            unsynced = int(member.get("unsynced_steps", 0))
            self.most_unsynced = max(self.most_unsynced, unsynced)
            if bound > 0 and unsynced >= bound + LOCAL_SGD_STEPS:
                self.violations.append(
                    f"run {run.get('run_id')}: {member.get('worker_id')} trained {unsynced} "
                    f"steps alone (max_unsynced_steps {bound})")

    def run_state(self):
        status = self.status(wait=True)
        run = status.get("run", {})
        return run.get("run_id"), run.get("state", "")

    # ---- faults ----------------------------------------------------------------------------
    def live_workers(self):
        return [key for key, proc in self.workers.items() if proc.poll() is None]

    def restart_node(self, node):
        """Starts the node again; returns the run's state when it does not (the run ended: the
        node's ranks left finish it, a new one would wait for the next run). While the run
        waits for its workers it is started again too: its ranks may not have formed their
        group yet, and a node waits for every one of its ranks to form it (README,
        Troubleshooting), so the survivors alone would give up after the formation timeout."""
        state = self.run_state()[1]
        if state not in ("RUN_STATE_RUNNING", "RUN_STATE_WAITING_FOR_WORKERS"):
            return state
        # All of the node's ranks at once: a rank whose peer dies first may exit on its own
        # (its collective failed) before its own SIGKILL, and that is part of this fault.
        procs = [self.workers[(node, r)] for r in range(self.args.ranks) if (node, r) in self.workers]
        for proc in procs:
            self.killed.add(proc.pid)
        for proc in procs:
            self.kill(proc)
        self.start_node(node)
        return None

    def fault(self, kind):
        rng = self.rng
        if kind == "kill_worker":
            live = self.live_workers()
            if not live:
                return "no live worker"
            node, rank = rng.choice(sorted(live))
            self.kill(self.workers[(node, rank)])
            time.sleep(rng.uniform(1, 3))  # the node's other ranks go on, maybe with a new leader
            # A rank whose peer died may exit on its own meanwhile (e.g. in the initial model's
            # broadcast, which a node does not survive a rank's death in): part of this fault.
            for other in range(self.args.ranks):
                proc = self.workers.get((node, other))
                if proc is not None and proc.poll() is not None:
                    self.killed.add(proc.pid)
            state = self.restart_node(node)
            if state is not None:
                return f"node-{node}/{rank} killed; node-{node} not started again (run {state})"
            return f"node-{node}/{rank} killed, node-{node} started again"
        if kind == "kill_coord":
            self.kill(self.coord)
            time.sleep(rng.uniform(0.5, 2))
            self.start_coordinator()
            return "coordinator killed and started again"
        if kind == "pause_worker":
            live = self.live_workers()
            if not live:
                return "no live worker"
            node, rank = rng.choice(sorted(live))
            proc = self.workers[(node, rank)]
            seconds = rng.uniform(1, 4)
            proc.send_signal(signal.SIGSTOP)
            time.sleep(seconds)
            proc.send_signal(signal.SIGCONT)
            return f"node-{node}/{rank} paused {seconds:.1f} s"
        if kind == "cut_link":
            node = rng.randrange(self.args.nodes)
            cut = self.proxies[node][2]
            seconds = rng.uniform(1, 6)
            open(cut, "w").close()
            time.sleep(seconds)
            os.unlink(cut)
            return f"node-{node}'s link cut {seconds:.1f} s"
        if kind == "slow_node":
            node = rng.randrange(self.args.nodes)
            procs = [p for (n, _), p in self.workers.items() if n == node and p.poll() is None]
            share = rng.choice([0.5, 0.25, 0.1])
            seconds = rng.uniform(2, 6)
            end = time.time() + seconds
            while time.time() < end:
                for p in procs:
                    p.send_signal(signal.SIGCONT)
                time.sleep(0.1 * share)
                for p in procs:
                    p.send_signal(signal.SIGSTOP)
                time.sleep(0.1 * (1 - share))
            for p in procs:
                if p.poll() is None:
                    p.send_signal(signal.SIGCONT)
            return f"node-{node} slowed to {share} for {seconds:.1f} s"
        if kind == "stop_start":
            run = self.runs[-1]
            result = self.ctl("stop", f"--run_id={run}", "--reason=chaos")
            if result.returncode != 0:
                return f"StopRun refused: {result.stderr.strip()}"
            self.stopped_runs.add(run)
            self.expect_workers_exit(f"run {run} stopped", 60)
            self.forget_run(run)
            self.start_run()
            return f"run {run} stopped, {self.runs[-1]} started"
        raise ValueError(kind)

    def expect_workers_exit(self, why, seconds):
        """Every worker that took the run up exits within `seconds`. One that has not taken it
        up IDLE_GRACE seconds from now started just as the run ended: it waits for the next run,
        as it should, and is stopped (SIGTERM)."""
        deadline = time.time() + seconds
        idle_deadline = time.time() + IDLE_GRACE
        for key, proc in list(self.workers.items()):
            while proc.poll() is None:
                now = time.time()
                if re.search(r" I run ", self.log_of(proc)):
                    if now > deadline:
                        raise Violation(f"{why}: worker node-{key[0]}/{key[1]} did not exit "
                                        f"within {seconds} s")
                elif now > idle_deadline:
                    self.kill(proc, signal.SIGTERM)
                    break
                time.sleep(0.1)
            if proc.returncode != 0 and proc.pid not in self.killed:
                raise Violation(f"{why}: worker node-{key[0]}/{key[1]} exited "
                                f"{proc.returncode}: " + self.tail_of(proc))
        self.ended_workers = dict(self.workers)  # for the checks of the run's end
        self.workers.clear()

    def check(self, when):
        if self.coord.poll() is not None and self.coord.pid not in self.killed:
            raise Violation(f"{when}: the coordinator exited {self.coord.returncode}")
        with self.lock:
            if self.violations:
                raise Violation(f"{when}: {self.violations[0]}")
        for key, proc in self.workers.items():
            if proc.poll() not in (None, 0) and proc.pid not in self.killed:
                raise Violation(f"{when}: worker node-{key[0]}/{key[1]} (pid {proc.pid}) "
                                f"exited {proc.returncode}: " + self.tail_of(proc))

    def dump_stacks(self):
        """Every live process's threads' stacks into logs/NAME.stacks (with gdb, where the
        machine has it): where a run that stopped making progress waits."""
        gdb = shutil.which("gdb")
        if gdb is None:
            return
        for proc in self.all_procs:
            if proc.poll() is not None:
                continue
            with open(f"{self.work}/logs/{self.names[proc.pid]}.stacks", "w") as out:
                try:
                    subprocess.run([gdb, "-batch", "-p", str(proc.pid), "-ex",
                                    "thread apply all bt"], stdout=out, stderr=subprocess.STDOUT,
                                   timeout=120)
                except subprocess.TimeoutExpired:
                    out.write("gdb timed out\n")

    def log_of(self, proc):
        return open(f"{self.work}/logs/{self.names[proc.pid]}.err", errors="replace").read()

    def tail_of(self, proc):
        return self.log_of(proc)[-1500:]

    # ---- the models ------------------------------------------------------------------------
    def digest_dumps(self, settled=10.0):
        """Replaces the post-sync dumps in pass-<k>/ folders older than `settled` seconds with
        their digests (length, sha256, each fragment's sha256, when written) and deletes every other dump file (pre-sync files, the latest-wins copies
        in the main folders), so that the soak's disk use stays small. `settled` is longer than
        any pause a fault makes, so no file is read while its writer is stopped mid-write."""
        now = time.time()
        for path in glob.glob(f"{self.work}/dump/*/node-*-i*/**/*.bin", recursive=True):
            try:
                if now - os.path.getmtime(path) < settled:
                    continue
                if "/pass-" in path and path.endswith(("-post.bin", "-merged.bin")):
                    written = os.path.getmtime(path)
                    data = open(path, "rb").read()
                    self.digests[path] = (len(data), hashlib.sha256(data).hexdigest(),
                                          [hashlib.sha256(data[part]).hexdigest()
                                           for part in self.fragment_slices(len(data))],
                                          written)
                os.unlink(path)
            except FileNotFoundError:
                pass

    def fragment_slices(self, size):
        """The byte ranges of the fragments (FragmentPlan: P runs of whole chunks of the run's
        chunk_bytes, balanced by chunks) of a dump of `size` bytes."""
        values, chunk = size // 4, CHUNK_BYTES // 4
        chunks = max(1, (values + chunk - 1) // chunk)
        bounds = [f * chunks // self.args.fragments * chunk for f in range(self.args.fragments)]
        bounds = [min(b, values) * 4 for b in bounds] + [size]
        return [slice(bounds[f], bounds[f + 1]) for f in range(self.args.fragments)]

    def forget_run(self, run):
        """Drops what is left of a finished run's dumps."""
        prefix = f"{self.work}/dump/{run}/"
        self.digests = {p: d for p, d in self.digests.items() if not p.startswith(prefix)}
        shutil.rmtree(prefix, ignore_errors=True)

    def posts(self, pattern):
        """(size, digest, fragment digests) of the post-sync (and post-merge) dumps matching
        `pattern`, digested or not."""
        self.digest_dumps(settled=0)
        return {path: d for path, d in self.digests.items() if fnmatch.fnmatch(path, pattern)}

    def lost_round_restores(self, run):
        """(time, global step) of each restore of `run` that lost committed rounds, from every
        coordinator's log: the run went on from an older model, so the steps after it came
        again, in other rounds."""
        restores = []
        pattern = re.compile(r"(\S+) W run (\S+): restored the global model of round \d+ "
                             r"\(global step (\d+),.*their model is lost")
        for log in glob.glob(f"{self.work}/logs/coord-*.err"):
            with open(log, errors="replace") as f:
                for line in f:
                    m = pattern.match(line)
                    if m and m.group(2) == run:
                        at = datetime.datetime.strptime(m.group(1), "%Y-%m-%dT%H:%M:%S.%fZ")
                        restores.append((at.replace(tzinfo=datetime.timezone.utc).timestamp(),
                                         int(m.group(3))))
        return restores

    def check_models(self, run, final):
        """Within a node incarnation: its ranks agree after each sync. Across nodes: two nodes
        whose syncs at the same step both succeeded (the same round: every node follows the
        run's global step; a restore that lost rounds starts the steps after its own again)
        hold the same model. Returns how many such pairs were compared."""
        size = len(final)
        # (step, epoch) -> node -> digests of successful syncs; the epoch counts the restores
        # that lost rounds before the sync and took the run below its step (no round commits
        # while no live node holds the model, so none is near a restore's time).
        synced = collections.defaultdict(dict)
        restores = self.lost_round_restores(run)
        # Each pass of a rank (a new one when its step went back) is in pass-<k>/; the node's
        # ranks go back together.
        posts = self.posts(f"{self.work}/dump/{run}/node-*-i*/pass-*/*-post.bin")
        dirs = {os.path.dirname(path) for path in posts}
        for inc_dir in sorted(dirs):
            node = int(re.search(r"node-(\d+)-i", inc_dir).group(1))
            inc = re.search(r"-i(\d+)", inc_dir).group(1)
            failed = set()  # in any pass of this incarnation: not compared
            for log in glob.glob(f"{self.work}/logs/w-{run}-{node}-*-i{inc}.err"):
                text = open(log).read()
                failed |= {int(s) for s in re.findall(r"sync at step (\d+):", text)}
                # A sync after which the rank took the run's step (it found the run ahead, or
                # ended) holds the run's model of that step, not its own step's round.
                failed |= {int(s) for s in re.findall(
                    r"going on from the run's step \d+ \(this rank was at step (\d+)\)", text)}
            steps = collections.defaultdict(dict)
            mtimes = collections.defaultdict(dict)  # step -> rank -> when its dump was written
            for path, (length, digest, parts, written) in posts.items():
                if os.path.dirname(path) != inc_dir or length != size:
                    continue  # another folder, or written while its process was killed
                name = os.path.basename(path)
                rank, step = int(name.split("-")[2]), int(name.split("-")[3])
                # With fragments, the values the sync at this step carried.
                steps[step][rank] = digest if len(parts) == 1 else parts[
                    (step % LOCAL_SGD_STEPS) // (LOCAL_SGD_STEPS // len(parts))]
                mtimes[step][rank] = written
            # A sync after which the node's step moved (it adopted a committed model of another
            # round: stale, or a new leader) holds that round's model: not compared either, nor
            # is the last sync of a pass.
            order = sorted(steps)
            moved = {s for i, s in enumerate(order)
                     if i + 1 == len(order)
                     or order[i + 1] != s + LOCAL_SGD_STEPS // self.args.fragments}
            for step, ranks in steps.items():
                if len(set(ranks.values())) > 1:
                    raise Violation(f"run {run}, {inc_dir}: its ranks differ after the sync at "
                                    f"step {step}")
                if step not in failed and step not in moved:
                    last = max(mtimes[step].values())
                    epoch = sum(1 for at, back_to in restores if at < last and back_to < step)
                    synced[(step, epoch)].setdefault(node, set()).add(next(iter(ranks.values())))
        compared = 0
        for step, nodes in synced.items():
            # Several passes of one node at one step (it started again, or went back) may be
            # different rounds: only unambiguous steps are compared.
            if len(nodes) < 2 or any(len(d) != 1 for d in nodes.values()):
                continue
            if len(set().union(*nodes.values())) > 1:
                raise Violation(f"run {run}: after their syncs at step {step[0]} the nodes hold "
                                "different models")
            compared += 1
        return compared

    # ---- the soak --------------------------------------------------------------------------
    def run_soak(self):
        stop = threading.Event()
        try:
            self.start_coordinator()
            for node in range(self.args.nodes):
                self.start_proxy(node)
            self.start_run()
            poller = threading.Thread(target=self.poll_status, args=(stop,), daemon=True)
            poller.start()
            kinds = ["kill_worker", "kill_coord", "pause_worker", "cut_link", "stop_start"]
            weights = [4, 2, 3, 3, 1]
            if self.args.round_seconds > 0:
                kinds.append("slow_node")
                weights.append(3)
            faults = 0
            while faults < self.args.faults:
                time.sleep(self.rng.uniform(0.2, 2 * self.args.mean_interval))
                self.digest_dumps()
                self.check(f"before fault {faults + 1}")
                run_id, state = self.run_state()
                if state == "RUN_STATE_COMPLETED":
                    self.expect_workers_exit(f"run {run_id} completed", 90)
                    self.check_run_end(run_id)
                    self.forget_run(run_id)
                    self.start_run()
                    continue
                kind = self.rng.choices(kinds, weights)[0]
                what = self.fault(kind)
                faults += 1
                self.counts[kind] += 1
                self.log(f"fault {faults}: {kind}: {what}")
                self.check(f"after fault {faults} ({kind})")
            # The last run goes to its end.
            run = self.runs[-1]
            deadline = time.time() + self.args.end_timeout
            while self.run_state()[1] != "RUN_STATE_COMPLETED":
                if time.time() > deadline:
                    raise Violation(f"run {run} did not complete within {self.args.end_timeout} s "
                                    f"of the last fault")
                self.check("waiting for the end")
                self.digest_dumps()
                time.sleep(1)
            self.expect_workers_exit(f"run {run} completed", 90)
            checked = self.check_run_end(run)
            self.check("at the end")
            stop.set()
            poller.join()
            # Nothing left behind: the coordinator drains and exits on SIGTERM.
            self.coord.send_signal(signal.SIGTERM)
            try:
                if self.coord.wait(timeout=30) != 0:
                    raise Violation(f"the coordinator exited {self.coord.returncode} on SIGTERM")
            except subprocess.TimeoutExpired:
                raise Violation("the coordinator did not exit within 30 s of SIGTERM")
            for proc, _, _ in self.proxies.values():
                self.kill(proc)
            left = [p.pid for p in self.all_procs if p.poll() is None]
            if left:
                raise Violation(f"processes left behind: {left}")
            total_checked = checked
            summary = {
                "faults": sum(self.counts.values()), "by_kind": dict(self.counts),
                "seed": self.args.seed, "runs": len(self.runs),
                "runs_completed": len(self.runs) - len(self.stopped_runs),
                "coordinator_starts": self.coord_starts,
                "node_starts": sum(self.incarnation.values()),
                "last_run_steps_compared_across_nodes": total_checked,
                "most_unsynced_steps_reported": self.most_unsynced,
                "seconds": round(time.time() - self.start, 1),
            }
            print("chaos soak: all invariants held: " + json.dumps(summary), flush=True)
            return 0
        except Violation as v:
            print(f"chaos soak: INVARIANT BROKEN: {v}", file=sys.stderr, flush=True)
            self.dump_stacks()
            # Every process's log, for the diagnosis (under bazel: the test's outputs).
            outputs = os.environ.get("TEST_UNDECLARED_OUTPUTS_DIR")
            if outputs:
                shutil.copytree(f"{self.work}/logs", f"{outputs}/soak-logs", dirs_exist_ok=True)
            return 1
        finally:
            stop.set()
            for proc in self.all_procs:
                if proc.poll() is None:
                    proc.kill()

    def check_run_end(self, run):
        """A completed run: FetchModel's model is every last rank's, and the saved model's."""
        out = f"{self.work}/final-{run}.bin"
        result = self.ctl("fetch", f"--run_id={run}", f"--out={out}")
        if result.returncode != 0:
            raise Violation(f"fetch of run {run} failed: {result.stderr}")
        m = re.search(r"round (\d+) global step (\d+)", result.stdout)
        final = open(out, "rb").read()
        # Every rank of the last incarnation of every node ends on the final model.
        for node in range(self.args.nodes):
            inc_dir = f"{self.work}/dump/{run}/node-{node}-i{self.incarnation[node]}"
            for rank in range(self.args.ranks):
                if self.ended_workers[(node, rank)].pid in self.killed:
                    continue  # killed by the last fault, as the run ended
                # The latest pass, then the latest step (a sync after a merge at one step).
                posts = self.posts(f"{inc_dir}/pass-*/node-{node}-{rank}-*-*.bin")
                if not posts:
                    continue  # this incarnation never synced (started just before the end)
                last = max(posts, key=lambda p: (int(re.search(r"pass-(\d+)/", p).group(1)),
                                                 int(os.path.basename(p).split("-")[3]),
                                                 p.endswith("-post.bin")))
                if posts[last][:2] != (len(final), hashlib.sha256(final).hexdigest()):
                    raise Violation(f"run {run}: node-{node}/{rank} ended on other parameters "
                                    f"than FetchModel's final model ({last})")
        saved = []
        for log in glob.glob(f"{self.work}/logs/w-{run}-0-*-i{self.incarnation[0]}.out"):
            saved += re.findall(r"saved the trained model \(run \S+, round (\d+), global step "
                                r"(\d+)\)", open(log).read())
        node0_killed = any(self.ended_workers[(0, r)].pid in self.killed
                           for r in range(self.args.ranks))
        if not saved and node0_killed:
            self.log(f"run {run}: node 0 lost a rank to the last fault as the run ended; "
                     "no saved model to check")
            saved = [(m.group(1), m.group(2))]
        if not saved:
            raise Violation(f"run {run}: nobody saved the model")
        if saved[-1] != (m.group(1), m.group(2)):
            raise Violation(f"run {run}: the saved model is round/step {saved[-1]}, FetchModel's "
                            f"{m.groups()}")
        if not node0_killed and not os.path.exists(f"{self.work}/model-{run}.pt"):
            raise Violation(f"run {run}: no model file")
        # The last rank of each node to leave removed the node's rendezvous folder (unless the
        # last fault killed one of them).
        for node in range(self.args.nodes):
            folder = f"{self.work}/rdv/localsgd-{run}-node-{node}"
            if os.path.exists(folder) and not any(
                    self.ended_workers[(node, r)].pid in self.killed for r in range(self.args.ranks)):
                raise Violation(f"run {run}: {folder} left behind: {sorted(os.listdir(folder))}")
        # Folders that killed ranks of earlier runs left behind are gone: each node's ranks
        # removed them as they formed their group in this run.
        earlier = sorted(f for f in os.listdir(f"{self.work}/rdv")
                         if f.startswith("localsgd-") and not f.startswith(f"localsgd-{run}-"))
        if earlier:
            raise Violation(f"run {run}: earlier runs' rendezvous folders left behind: {earlier}")
        checked = self.check_models(run, final)
        self.log(f"run {run} completed at round {m.group(1)}, global step {m.group(2)}: every "
                 f"rank on the final model; {checked} steps compared across nodes")
        return checked


def main():
    # SIGTERM (bazel's timeout, a Ctrl-C'd wrapper) ends the soak through its cleanup, so that
    # no worker or coordinator it started outlives it.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--bin", required=True,
                        help="bazel-bin, or the runfiles root: where the binaries are")
    parser.add_argument("--work", required=True)
    parser.add_argument("--faults", type=int, default=50)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--nodes", type=int, default=2)
    parser.add_argument("--ranks", type=int, default=2)
    parser.add_argument("--total_steps", type=int, default=1600)
    parser.add_argument("--overlap_steps", type=int, default=0,
                        help="the runs' overlap_steps (local_sgd_steps is 4)")
    parser.add_argument("--fragments", type=int, default=1,
                        help="the runs' fragments (a divisor of local_sgd_steps 4)")
    parser.add_argument("--round_seconds", type=float, default=0,
                        help="pace the runs' rounds (RunSpec.round_seconds, and as much grace)")
    parser.add_argument("--mean_interval", type=float, default=1.0,
                        help="mean seconds between the end of a fault and the next")
    parser.add_argument("--end_timeout", type=float, default=600)
    args = parser.parse_args()
    return Soak(args).run_soak()


if __name__ == "__main__":
    sys.exit(main())
