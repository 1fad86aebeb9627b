"""A local localsgd cluster for the benchmarks: builds the binaries (-c opt), starts a real
coordinator and worker processes (optionally each inside a network namespace), starts a run
through localsgdctl and collects the workers' output."""
import collections
import os
import re
import statistics
import subprocess
import threading
import time

TARGETS = ["//coordinator", "//coordinator:localsgdctl", "//worker", "//deploy:delay_line"]


def build(targets=TARGETS):
    """Builds with -c opt and returns the bazel-bin folder."""
    subprocess.run(["bazel", "build", "-c", "opt"] + targets, check=True,
                   stderr=subprocess.DEVNULL)
    return subprocess.run(["bazel", "info", "-c", "opt", "bazel-bin"], check=True,
                          capture_output=True, text=True).stdout.strip()


class Hosts:
    """with Hosts("lsgdx", 5, "200mbit", "25ms", bin_dir): ... -- deploy/netns/hosts.sh's hosts
    PREFIX-h0 .. h{n-1} (10.77.0.{i+1}), every link at `rate`, each host's ingress holding
    `delay` (one value, or one per host comma-separated; "" for none) in the delay line built
    with the binaries in `bin_dir` (//deploy:delay_line), with TCP tuned for long fat pipes when
    `tuned_tcp` (hosts.sh's TUNED_TCP); taken down, with every process in them, at exit."""

    def __init__(self, prefix, hosts, rate, delay="", bin_dir=None, tuned_tcp=False):
        self.prefix, self.hosts = prefix, hosts
        self.up = ["deploy/netns/hosts.sh", "up", prefix, str(hosts), rate] + ([delay] if delay else [])
        self.env = dict(os.environ)
        if bin_dir:
            self.env["DELAY_LINE"] = f"{bin_dir}/deploy/delay_line"
        if tuned_tcp:
            self.env["TUNED_TCP"] = "1"

    def __enter__(self):
        subprocess.run(self.up, check=True, env=self.env)
        return self

    def __exit__(self, *exc):
        subprocess.run(["deploy/netns/hosts.sh", "down", self.prefix, str(self.hosts)], check=False)


def start_coordinator(bin_dir, work, flags=(), prefix=(), listen="127.0.0.1:0",
                      token="bench-token", log=None):
    """Starts a coordinator (token `token`, also written to WORK/token) and returns the process
    and its gRPC address, once it listens. `prefix` runs it elsewhere (["ip", "netns", ...])."""
    token_file = os.path.join(work, "token")
    with open(token_file, "w") as f:
        f.write(token)
    coordinator = subprocess.Popen(
        list(prefix) + [f"{bin_dir}/coordinator/coordinator", f"--grpc_address={listen}",
                        "--http_address=", f"--token_file={token_file}", "--lease_timeout=600s",
                        "--heartbeat_interval=1s"] + list(flags),
        stdout=subprocess.PIPE, stderr=log or subprocess.DEVNULL, text=True)
    for line in coordinator.stdout:
        m = re.match(r"grpc listening on (\S+)", line)
        if m:
            return coordinator, m.group(1)
    raise RuntimeError("the coordinator did not start")


def gloo_worker(rank, nodes, numel, rounds, master, out_path, ifname=None):
    """One torch.distributed Gloo process: `rounds` all_reduce + divide of `numel` floats; rank 0
    writes the slowest rank's time of every round but the first to out_path, and the CPU seconds
    per round of all ranks together (user + system, every thread, rounds after the first) to
    out_path + ".cpu"."""
    import resource
    import time
    import torch
    import torch.distributed as dist
    torch.set_num_threads(1)
    if ifname:
        os.environ["GLOO_SOCKET_IFNAME"] = ifname
    dist.init_process_group("gloo", init_method=f"tcp://{master}", rank=rank, world_size=nodes)
    tensor = torch.randn(numel)
    def cpu_seconds():
        usage = resource.getrusage(resource.RUSAGE_SELF)
        return usage.ru_utime + usage.ru_stime

    times = []
    for r in range(rounds):
        dist.barrier()
        if r == 1:
            cpu_start = cpu_seconds()
        start = time.perf_counter()
        dist.all_reduce(tensor)
        tensor /= nodes
        times.append(time.perf_counter() - start)
    cpu = (cpu_seconds() - cpu_start) / (rounds - 1) if rounds > 1 else 0.0
    gathered = [None] * nodes
    dist.all_gather_object(gathered, (times, cpu))
    if rank == 0:
        with open(out_path, "w") as f:
            for r in range(1, rounds):
                f.write(f"{max(g[0][r] for g in gathered)}\n")
        with open(out_path + ".cpu", "w") as f:
            f.write(f"{sum(g[1] for g in gathered)}\n")
    dist.destroy_process_group()


def outputs_of(processes, what, timeout):
    """The stdout of each process (text pipes), once it ended; RuntimeError naming `what` and
    giving its stderr if one failed."""
    outputs = []
    for process in processes:
        out, err = process.communicate(timeout=timeout)
        if process.returncode != 0:
            raise RuntimeError(f"{what} failed: {err}")
        outputs.append(out)
    return outputs


def cpu_per_round(outputs):
    """The "cpu_seconds_per_round X" lines of averaging_member or ring_ceiling outputs, summed."""
    return sum(float(re.search(r"cpu_seconds_per_round (\S+)", o).group(1)) for o in outputs)


RoundTimes = collections.namedtuple("RoundTimes", ["slowest", "ready", "ready_mean"],
                                    defaults=[float("nan")])


def member_round_times(outputs):
    """Round times from averaging_member outputs ("round R seconds T from S to E"), medians over
    the measured rounds (the first is a warm-up). `slowest`: the slowest member's own round, from
    its Sync call to its return, so it includes waiting for the members still finishing the
    round before. `ready`: from the moment the last member called Sync to the moment the last
    one returned, which is what the Gloo figure measures (timed after a barrier);
    `ready_mean`: its mean (what something that slows a few rounds, a checkpoint write, costs
    in all)."""
    per_round = {}
    for out in outputs:
        for r, t, start, end in re.findall(
                r"round (\d+) seconds ([\d.]+) from ([\d.]+) to ([\d.]+)", out):
            per_round.setdefault(int(r), []).append((float(t), float(start), float(end)))
    measured = [per_round[r] for r in sorted(per_round) if r > 1]
    ready = [max(e for _, _, e in m) - max(s for _, s, _ in m) for m in measured]
    return RoundTimes(statistics.median(max(t for t, _, _ in m) for m in measured),
                      statistics.median(ready), statistics.mean(ready))


class Cluster:
    """with Cluster(bin_dir, work) as c: c.workers(4); c.start(spec); outputs = c.wait()

    `host(i)` gives the command prefix that runs a process on host i (0: the coordinator's;
    worker n runs on host n + 1), e.g. ["ip", "netns", "exec", "ns-h1"]; `listen` is the
    coordinator's gRPC address (port 0: a free one, read back); `http` its status endpoint's
    (empty: none)."""

    def __init__(self, bin_dir, work, host=lambda i: [], listen="127.0.0.1:0", http=""):
        self.bin, self.work, self.host, self.listen = bin_dir, work, host, listen
        self.http = http
        self.token = os.path.join(work, "token")
        with open(self.token, "w") as f:
            f.write("bench")
        self.procs = []
        self.worker_procs = []

    def __enter__(self):
        coordinator = subprocess.Popen(
            self.host(0) + [f"{self.bin}/coordinator/coordinator", f"--grpc_address={self.listen}",
                            f"--http_address={self.http}", f"--token_file={self.token}",
                            "--lease_timeout=60s"],
            stdout=subprocess.PIPE, stderr=open(os.path.join(self.work, "coordinator.err"), "w"),
            text=True)
        self.procs.append(coordinator)
        self.address = re.match(r"grpc listening on (\S+)", coordinator.stdout.readline()).group(1)
        return self

    def __exit__(self, *exc):
        for p in self.procs:
            p.kill()
            p.wait()

    def workers(self, nodes, *flags):
        """One worker per node (node-0 ...), with extra worker flags."""
        for n in range(nodes):
            p = subprocess.Popen(
                self.host(n + 1) + [f"{self.bin}/worker/worker", f"--coordinator={self.address}",
                                    f"--token_file={self.token}", f"--node_name=node-{n}",
                                    f"--node_rank={n}", f"--num_nodes={nodes}",
                                    f"--rendezvous_dir={self.work}", "--log_every=1000000",
                                    *flags],
                stdout=subprocess.PIPE, stderr=open(os.path.join(self.work, f"node-{n}.err"), "w"),
                text=True)
            self.procs.append(p)
            self.worker_procs.append(p)

    def start(self, spec_text):
        spec = os.path.join(self.work, "spec.textproto")
        with open(spec, "w") as f:
            f.write(spec_text + "\n")
        subprocess.run(self.host(0) + [f"{self.bin}/coordinator/localsgdctl",
                                       f"--coordinator={self.address}",
                                       f"--token_file={self.token}", "start", f"--spec={spec}"],
                       check=True, stdout=subprocess.DEVNULL)

    def wait(self, timeout=6 * 3600):
        """The workers' standard outputs, in node order."""
        return [p.communicate(timeout=timeout)[0] for p in self.worker_procs]


def done_line(output):
    """The worker's final line as a dict: steps, loss, accuracy, samples_per_second, samples
    (trained on: in paced runs fewer than steps x batch)."""
    m = re.search(r" done: (\d+) steps, loss ([\d.]+), test accuracy ([\d.]+), test loss "
                  r"[\d.]+, samples/s ([\d.]+), samples (\d+)", output)
    return {"steps": int(m.group(1)), "loss": float(m.group(2)),
            "accuracy": float(m.group(3)), "samples_per_second": float(m.group(4)),
            "samples": int(m.group(5))}


def timed_outputs(procs):
    """Each process's standard output and the time.monotonic() at which its "done" line came."""
    results = [None] * len(procs)

    def read(i, p):
        lines, done_at = [], None
        for line in p.stdout:
            lines.append(line)
            if done_at is None and " done: " in line:
                done_at = time.monotonic()
        p.wait()
        results[i] = ("".join(lines), done_at)

    threads = [threading.Thread(target=read, args=(i, p)) for i, p in enumerate(procs)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return results
