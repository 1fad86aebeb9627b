#!/usr/bin/python3
"""Averaging round time, star and sharded, against torch.distributed Gloo all_reduce, on loopback.

For each N (node leaders) and S (MB of fp32 parameters) it starts a real coordinator and N
member processes (//tests/testutil:averaging_member, each serving its own data plane) that sync S MB per
round, once per codec and exchange mode (star: every delta through the coordinator; sharded:
the leaders average among themselves, each owning a range); then, in the same run, N
torch.distributed processes with the Gloo backend doing all_reduce + divide on the same S MB
(what Accelerate's LocalSGD does on CPUs). Round times are medians over the measured rounds
(the first is a warm-up) of two figures (localsgd_cluster.member_round_times): `X s`, the
slowest member's own round, waiting for the others to arrive included; `X@ready s`, from the
last member's arrival to the last member's return, which is how the Gloo figure is timed
(after a barrier). Ratios are round time / Gloo round time (lower is better).

Usage: /usr/bin/python3 bench/averaging_bench.py [--nodes 2 4] [--sizes_mb 10 100] [--rounds 5]
       [--codecs CODEC_FP32 ...] [--exchanges EXCHANGE_STAR EXCHANGE_SHARDED] [--chunk_kb 256]
(builds with `bazel build -c opt` first; run from the repository root.)
"""
import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
import threading
import time

from localsgd_cluster import (build, cpu_per_round, gloo_worker, member_round_times, outputs_of,
                              start_coordinator)

CODECS = ["CODEC_FP32", "CODEC_BF16", "CODEC_FP16", "CODEC_INT8"]


def localsgd_round(bin_dir, work, nodes, size_mb, codec, exchange, rounds, chunk_kb,
                   coordinator_flags=(), peaks=None, member_flags=(), spec_extra="",
                   outputs=None):
    """(RoundTimes, the members' CPU seconds per round together and the coordinator's, both
    over the rounds after the first). `outputs`, a list, gets the members' outputs. `peaks`,
    a dict, gets each process's peak RSS in MB
    ("coordinator", "node-0", ...). `member_flags` go to every member, `spec_extra` (run spec
    text) into the run's spec."""
    coordinator, address = start_coordinator(bin_dir, work, flags=coordinator_flags,
                                              log=open(os.path.join(work, "coordinator.log"), "w"))
    token_file = os.path.join(work, "token")
    coordinator_cpu = CpuSampler(coordinator.pid)
    try:
        values = int(size_mb * 1e6 / 4)
        members = [subprocess.Popen(
            [f"{bin_dir}/tests/testutil/averaging_member", f"--coordinator={address}",
             "--token=bench-token", f"--node=node-{i}", f"--values={values}",
             f"--rounds={rounds}", *member_flags],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for i in range(nodes)]
        coordinator_cpu.watch_peaks({"coordinator": coordinator.pid,
                                     **{f"node-{i}": m.pid for i, m in enumerate(members)}})
        spec = os.path.join(work, "spec.textproto")
        with open(spec, "w") as f:
            f.write(f'model {{ builtin: "mlp" }} min_workers: {nodes} codec: {codec} '
                    f'round_deadline_seconds: 600 total_steps: 1000000000 '
                    f'exchange: {exchange} {spec_extra}'
                    + (f' chunk_bytes: {chunk_kb * 1024}' if chunk_kb else '') + '\n')
        subprocess.run([f"{bin_dir}/coordinator/localsgdctl", f"--coordinator={address}",
                        f"--token_file={token_file}", "start", f"--spec={spec}"],
                       check=True, stdout=subprocess.DEVNULL)
        member_outputs = outputs_of(members, "member", 1800)
        if outputs is not None:
            outputs.extend(member_outputs)
        outputs = member_outputs
        members_cpu = cpu_per_round(outputs)
        rounds_run = r"round (\d+) seconds \S+ from (\S+) to (\S+)"
        measured = [(int(r), float(start), float(end)) for o in outputs
                    for r, start, end in re.findall(rounds_run, o) if int(r) > 1]
        window = (min(m[1] for m in measured), max(m[2] for m in measured))
        return (member_round_times(outputs), members_cpu,
                coordinator_cpu.between(*window) / len({m[0] for m in measured}))
    finally:
        coordinator_cpu.stop()
        if peaks is not None:
            peaks.update(coordinator_cpu.peaks)
        coordinator.terminate()
        coordinator.wait()


class CpuSampler:
    """Samples a process's user + system seconds (/proc/PID/stat) every 20 ms on a thread of
    its own, for the CPU it used between two moments (Unix seconds); and, for the processes
    given to watch_peaks, their peak RSS in MB (VmHWM) as last seen alive (`peaks`)."""

    def __init__(self, pid):
        self._path = f"/proc/{pid}/stat"
        self._samples = []
        self._watched = {}
        self.peaks = {}
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def watch_peaks(self, pids):
        self._watched = dict(pids)

    def _run(self):
        tick = os.sysconf("SC_CLK_TCK")
        while not self._done.wait(0.02):
            with open(self._path) as f:
                fields = f.read().rsplit(")", 1)[1].split()
            self._samples.append((time.time(), (int(fields[11]) + int(fields[12])) / tick))
            for name, pid in list(self._watched.items()):
                try:
                    with open(f"/proc/{pid}/status") as f:
                        m = re.search(r"VmHWM:\s+(\d+) kB", f.read())
                except OSError:
                    continue  # it ended: its last figure stands
                if m:
                    self.peaks[name] = int(m.group(1)) / 1024

    def stop(self):
        self._done.set()
        self._thread.join()

    def between(self, start, end):
        def at(t):  # the last sample at or before t
            return max((s for s in self._samples if s[0] <= t), default=self._samples[0])[1]
        return at(end) - at(start)


def gloo_round(work, nodes, size_mb, rounds):
    """Gloo's round: (median seconds, CPU seconds per round of all ranks together)."""
    import socket
    import torch.multiprocessing as mp
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    out_path = os.path.join(work, "gloo.txt")
    mp.spawn(gloo_worker, args=(nodes, int(size_mb * 1e6 / 4), rounds, f"127.0.0.1:{port}",
                                out_path), nprocs=nodes, join=True)
    with open(out_path) as f:
        seconds = statistics.median(float(line) for line in f)
    with open(out_path + ".cpu") as f:
        return seconds, float(f.read())


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nodes", type=int, nargs="+", default=[2, 4])
    parser.add_argument("--sizes_mb", type=float, nargs="+", default=[10, 100])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--codecs", nargs="+", default=CODECS)
    parser.add_argument("--exchanges", nargs="+", default=["EXCHANGE_STAR", "EXCHANGE_SHARDED"])
    parser.add_argument("--chunk_kb", type=int, default=None,
                        help="the run spec's chunk_bytes (default: each exchange's own)")
    args = parser.parse_args()
    bin_dir = build(["//coordinator", "//coordinator:localsgdctl", "//tests/testutil:averaging_member"])
    names = [e[len("EXCHANGE_"):].lower() for e in args.exchanges]
    columns = [c for n in names for c in (n, n + "@ready")]
    print(f"{'N':>2} {'MB':>6} {'codec':<6} " + " ".join(f"{c + ' s':>16}" for c in columns) +
          f" {'gloo s':>9} " + " ".join(f"{c + '/gloo':>18}" for c in columns))
    with tempfile.TemporaryDirectory() as work:
        for nodes in args.nodes:
            for size_mb in args.sizes_mb:
                gloo = gloo_round(work, nodes, size_mb, args.rounds)[0]
                for codec in args.codecs:
                    times = [t for exchange in args.exchanges
                             for t in localsgd_round(bin_dir, work, nodes, size_mb, codec,
                                                     exchange, args.rounds, args.chunk_kb)[0]]
                    print(f"{nodes:>2} {size_mb:>6g} {codec[6:].lower():<6} " +
                          " ".join(f"{t:>16.4f}" for t in times) + f" {gloo:>9.4f} " +
                          " ".join(f"{t / gloo:>18.2f}" for t in times), flush=True)


if __name__ == "__main__":
    sys.exit(main())
