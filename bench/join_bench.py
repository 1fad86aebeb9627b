#!/usr/bin/python3
"""Cost of persisting membership: the time for W sequential Joins (bench/heartbeat_load, one
client, real gRPC on loopback) against a coordinator with --state_dir and one without, in the
same run. Target: with a state folder at most 2x the time without.

Usage: /usr/bin/python3 bench/join_bench.py [--workers 4000] [--repeats 3]
(builds with `bazel build -c opt` first; run from the repository root.)
"""
import argparse
import os
import re
import statistics
import subprocess
import tempfile

from localsgd_cluster import build, start_coordinator


def join_seconds(bin_dir, work, workers, state_dir):
    flags = [f"--state_dir={state_dir}"] if state_dir else []
    coordinator, address = start_coordinator(bin_dir, work, flags=flags, token="load")
    try:
        out = subprocess.run([f"{bin_dir}/bench/heartbeat_load", f"--coordinator={address}",
                              "--token=load", f"--workers={workers}", "--seconds=0s",
                              "--channels=1", "--threads=1"],
                             check=True, capture_output=True, text=True).stdout
        return float(re.search(r"joins \d+ seconds ([\d.]+)", out).group(1))
    finally:
        coordinator.terminate()
        coordinator.wait()


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workers", type=int, default=4000)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    bin_dir = build(["//coordinator", "//bench:heartbeat_load"])
    without, with_state = [], []
    with tempfile.TemporaryDirectory() as work:
        for i in range(args.repeats):
            without.append(join_seconds(bin_dir, work, args.workers, None))
            with_state.append(join_seconds(bin_dir, work, args.workers,
                                           os.path.join(work, f"state-{i}")))
    a, b = statistics.median(without), statistics.median(with_state)
    print(f"{args.workers} joins: without a state folder {a:.3f} s, with one {b:.3f} s, "
          f"ratio {b / a:.2f} (runs {without} / {with_state})")


if __name__ == "__main__":
    main()
