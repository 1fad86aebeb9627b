"""A local localsgd cluster for the benchmarks: builds the binaries (-c opt), starts a real
coordinator and worker processes (optionally each inside a network namespace), starts a run
through localsgdctl and collects the workers' output."""
import os
import re
import subprocess

TARGETS = ["//coordinator", "//coordinator:localsgdctl", "//worker"]


def build(targets=TARGETS):
    """Builds with -c opt and returns the bazel-bin folder."""
    subprocess.run(["bazel", "build", "-c", "opt"] + targets, check=True,
                   stderr=subprocess.DEVNULL)
    return subprocess.run(["bazel", "info", "-c", "opt", "bazel-bin"], check=True,
                          capture_output=True, text=True).stdout.strip()


class Cluster:
    """with Cluster(bin_dir, work) as c: c.workers(4); c.start(spec); outputs = c.wait()

    `host(i)` gives the command prefix that runs a process on host i (0: the coordinator's;
    worker n runs on host n + 1), e.g. ["ip", "netns", "exec", "ns-h1"]; `listen` is the
    coordinator's gRPC address (port 0: a free one, read back)."""

    def __init__(self, bin_dir, work, host=lambda i: [], listen="127.0.0.1:0"):
        self.bin, self.work, self.host, self.listen = bin_dir, work, host, listen
        self.token = os.path.join(work, "token")
        with open(self.token, "w") as f:
            f.write("bench")
        self.procs = []
        self.worker_procs = []

    def __enter__(self):
        coordinator = subprocess.Popen(
            self.host(0) + [f"{self.bin}/coordinator/coordinator", f"--grpc_address={self.listen}",
                            "--http_address=", f"--token_file={self.token}",
                            "--lease_timeout=60s"],
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
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
                stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
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
    """The worker's final line as a dict: steps, loss, accuracy, samples_per_second."""
    m = re.search(r" done: (\d+) steps, loss ([\d.]+), test accuracy ([\d.]+), test loss "
                  r"[\d.]+, samples/s ([\d.]+)", output)
    return {"steps": int(m.group(1)), "loss": float(m.group(2)),
            "accuracy": float(m.group(3)), "samples_per_second": float(m.group(4))}
