#!/usr/bin/python3
"""What durability costs a round (issue 54): the sharded fp32 round with and without the
coordinator's `--state_dir`, and with the members' checkpoints (`--checkpoint_dir` on each
member, at each --checkpoint_shares), beside Gloo, with every process's peak RSS.

For each N (node leaders) and S (MB of fp32 parameters), in one sitting: N
//tests/testutil:averaging_member processes sync S MB per round through a real coordinator
started without a state folder, then with one (on this machine's disk, as every file in
deploy/ runs it) for each --model_save_share given (the default 0.05, and 1: a model.bin write
behind every commit, back to back: the most a state folder can cost a round), then N
torch.distributed Gloo processes all_reduce the same S MB
(bench/averaging_bench.py's measures: `@ready`, from the last member's arrival to the last
member's return, its median over the rounds after the first, and its mean, which is what a
write that slows a few rounds costs in all; `xnone` is the mean against the first row's). Peak
RSS is VmHWM, read every 20 ms while each process lives. `checkpointed rounds`: the rounds the
members wrote (the last one at the run's end).

Usage: /usr/bin/python3 bench/durability_bench.py [--nodes 2] [--sizes_mb 1000] [--rounds 4]
       [--shares 0.05 1] [--checkpoint_shares 0.05 1]
(builds with `bazel build -c opt` first; run from the repository root.)
"""
import argparse
import os
import re
import sys
import tempfile

from averaging_bench import gloo_round, localsgd_round
from localsgd_cluster import build


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nodes", type=int, nargs="+", default=[2])
    parser.add_argument("--sizes_mb", type=float, nargs="+", default=[1000])
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--shares", type=float, nargs="*", default=[0.05, 1],
                        help="the coordinator's --model_save_share values to run")
    parser.add_argument("--checkpoint_shares", type=float, nargs="*", default=[0.05, 1],
                        help="the run's checkpoint_share values to run with the members' "
                             "checkpoints on (coordinator without a state folder)")
    parser.add_argument("--state_root", default=None,
                        help="where the state folder goes (default: a temporary folder)")
    args = parser.parse_args()
    bin_dir = build(["//coordinator", "//coordinator:localsgdctl",
                     "//tests/testutil:averaging_member"])
    print(f"{'N':>2} {'MB':>6} {'durability':<24} {'round@ready s':>14} {'mean s':>10} "
          f"{'xnone':>8} {'gloo s':>8} "
          f"{'xGloo':>6} {'coordinator MB':>15} {'member MB (max)':>16}  checkpointed rounds")
    with tempfile.TemporaryDirectory(dir=args.state_root) as work:
        for nodes in args.nodes:
            for size_mb in args.sizes_mb:
                rows = []
                # (label, coordinator flags, member flags, spec text)
                runs = [("none", [], [], "")] + [
                    (f"--state_dir, share {share:g}",
                     [f"--state_dir={work}/state-{nodes}-{size_mb:g}-{share:g}",
                      f"--model_save_share={share}"], [], "") for share in args.shares] + [
                    (f"checkpoints, share {share:g}", [],
                     [f"--checkpoint_dir={work}/checkpoints-{nodes}-{size_mb:g}-{share:g}"],
                     f"checkpoint_share: {share}") for share in args.checkpoint_shares]
                for label, flags, member_flags, spec_extra in runs:
                    peaks, outputs = {}, []
                    times = localsgd_round(bin_dir, work, nodes, size_mb, "CODEC_FP32",
                                           "EXCHANGE_SHARDED", args.rounds, None,
                                           coordinator_flags=flags, peaks=peaks,
                                           member_flags=member_flags, spec_extra=spec_extra,
                                           outputs=outputs)[0]
                    members = max(v for k, v in peaks.items() if k != "coordinator")
                    written = sorted({int(r) for o in outputs for r in
                                      re.findall(r"checkpoint of round (\d+) took", o)})
                    rows.append((label, times.ready, times.ready_mean,
                                 peaks.get("coordinator", 0), members,
                                 ",".join(map(str, written)) or "-"))
                gloo = gloo_round(work, nodes, size_mb, args.rounds)[0]
                baseline = rows[0][2]
                for label, ready, mean, coordinator, members, written in rows:
                    print(f"{nodes:>2} {size_mb:>6g} {label:<24} {ready:>14.3f} {mean:>10.3f} "
                          f"{mean / baseline:>8.2f} {gloo:>8.3f} {ready / gloo:>6.2f} "
                          f"{coordinator:>15.0f} {members:>16.0f}  {written}", flush=True)


if __name__ == "__main__":
    sys.exit(main())
