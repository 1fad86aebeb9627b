#!/usr/bin/python3
"""Control-plane load: 1000 simulated workers (one process, many stubs; bench/heartbeat_load)
heartbeat once a second against one coordinator for 60 s. Prints p50/p99 heartbeat latency,
leases that expired by mistake (must be 0), the coordinator's CPU (% of one core) and memory
(peak RSS), and how /status answered meanwhile (polled every second).

Usage: /usr/bin/python3 bench/heartbeat_load_bench.py [--workers 1000] [--seconds 60]
(builds with `bazel build -c opt` first; run from the repository root.)
"""
import argparse
import json
import os
import re
import subprocess
import tempfile
import time
import urllib.request

from localsgd_cluster import build


def proc_stat(pid):
    """(CPU seconds, RSS MiB) of a process, from /proc."""
    fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    ticks = os.sysconf("SC_CLK_TCK")
    cpu = (int(fields[11]) + int(fields[12])) / ticks
    rss = int(re.search(r"VmRSS:\s+(\d+)", open(f"/proc/{pid}/status").read()).group(1)) / 1024
    return cpu, rss


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workers", type=int, default=1000)
    parser.add_argument("--seconds", type=int, default=60)
    args = parser.parse_args()
    bin_dir = build(["//coordinator", "//bench:heartbeat_load"])
    with tempfile.TemporaryDirectory() as work:
        token = os.path.join(work, "token")
        with open(token, "w") as f:
            f.write("load")
        coordinator = subprocess.Popen(
            [f"{bin_dir}/coordinator/coordinator", "--grpc_address=127.0.0.1:0",
             "--http_address=127.0.0.1:0", f"--token_file={token}", "--lease_timeout=15s",
             "--heartbeat_interval=1s"],
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        try:
            grpc = re.match(r"grpc listening on (\S+)", coordinator.stdout.readline()).group(1)
            http = re.match(r"http listening on (\S+)", coordinator.stdout.readline()).group(1)
            load = subprocess.Popen(
                [f"{bin_dir}/bench/heartbeat_load", f"--coordinator={grpc}", "--token=load",
                 f"--workers={args.workers}", f"--seconds={args.seconds}s"],
                stdout=subprocess.PIPE, text=True)
            status_ms, status_errors, members_seen, rss_peak = [], 0, 0, 0.0
            cpu_start, _ = proc_stat(coordinator.pid)
            t_start = time.time()
            while load.poll() is None:
                t = time.time()
                try:
                    body = urllib.request.urlopen(f"http://{http}/status", timeout=5).read()
                    status_ms.append((time.time() - t) * 1000)
                    members_seen = max(members_seen, len(json.loads(body).get("members", [])))
                except OSError:
                    status_errors += 1
                rss_peak = max(rss_peak, proc_stat(coordinator.pid)[1])
                time.sleep(max(0.0, 1.0 - (time.time() - t)))
            cpu_end, _ = proc_stat(coordinator.pid)
            elapsed = time.time() - t_start
            result = load.stdout.read().strip()
            status = json.load(urllib.request.urlopen(f"http://{http}/status", timeout=5))
        finally:
            coordinator.kill()
            coordinator.wait()
    print(f"load: {result}")
    print(f"leases expired by mistake: {status.get('leasesExpiredTotal', status.get('leases_expired_total', 0))}"
          f" (heartbeats counted by the coordinator: "
          f"{status.get('heartbeatsTotal', status.get('heartbeats_total'))})")
    print(f"coordinator CPU: {100 * (cpu_end - cpu_start) / elapsed:.1f}% of one core over "
          f"{elapsed:.0f} s; peak RSS {rss_peak:.1f} MiB")
    status_ms.sort()
    print(f"/status: {len(status_ms)} answers, {status_errors} failures, "
          f"p50 {status_ms[len(status_ms) // 2]:.1f} ms, max {status_ms[-1]:.1f} ms, "
          f"{members_seen} members listed")


if __name__ == "__main__":
    main()
