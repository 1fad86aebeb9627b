#!/usr/bin/env python3
"""Asks the coordinator's /status (JSON) a question, for the multi-process tests: they read
rounds, members, events and results from the API, never from log text.

    status_query.py HTTP_ADDRESS EXPRESSION [--wait SECONDS] [--print]

EXPRESSION is Python over the status, with these names:
  s          the whole status (int64 fields as ints)
  run        s["run"]
  rounds     the recent rounds, oldest first; committed: those committed
  members    live members by worker id
  results    the run's member results by worker id
  events(kind=None, worker=None)  the events of that kind (and worker), oldest first
  members_of(r)  the sorted member ids of round r
  t(timestamp)   a JSON timestamp ("2026-11-30T12:00:00.5Z") as seconds since the epoch
Without --print it exits 0 when the value is true, else 1 (after waiting up to --wait seconds
for it to become true, looking every 0.1 s), printing the expression and a summary of the
status on failure. With --print it prints the value (as JSON) and exits 0.
"""
import argparse
import datetime
import json
import re
import sys
import time
import urllib.request

TEXT_KEYS = {"worker_id", "member_id", "node_name", "hostname", "text", "run_id", "name",
             "reason", "left_reason", "path", "model_path", "kind", "data_address"}


def ints(value, key=None):
    """The JSON mapping prints int64 fields as strings: back to ints (not for text fields)."""
    if isinstance(value, dict):
        return {k: ints(v, k) for k, v in value.items()}
    if isinstance(value, list):
        return [ints(v, key) for v in value]
    if isinstance(value, str) and key not in TEXT_KEYS and re.fullmatch(r"-?\d+", value):
        return int(value)
    return value


def fetch(address):
    with urllib.request.urlopen(f"http://{address}/status", timeout=10) as response:
        return ints(json.load(response))


def seconds(timestamp):
    """RFC 3339 as the JSON mapping prints it (UTC, "Z", 0 to 9 fraction digits)."""
    whole, _, fraction = timestamp.rstrip("Z").partition(".")
    base = datetime.datetime.strptime(whole, "%Y-%m-%dT%H:%M:%S")
    return base.replace(tzinfo=datetime.timezone.utc).timestamp() + float(f"0.{fraction or 0}")


def names(s):
    run = s.get("run", {})
    rounds = s.get("recent_rounds", [])

    def events(kind=None, worker=None):
        return [e for e in s.get("events", [])
                if (kind is None or e.get("kind") == kind)
                and (worker is None or e.get("worker_id") == worker)]

    return {
        "s": s, "run": run, "rounds": rounds,
        "committed": [r for r in rounds if r.get("outcome") == "ROUND_OUTCOME_COMMITTED"],
        "members": {m["worker_id"]: m for m in s.get("members", [])},
        "results": {m["worker_id"]: m for m in run.get("member_results", [])},
        "events": events,
        "members_of": lambda r: sorted(r.get("members", [])),
        "t": seconds,
    }


def summary(s):
    run = s.get("run", {})
    lines = [f"run {run.get('run_id')} {run.get('state')} round {run.get('round')} "
             f"step {run.get('global_step')} reason {run.get('reason')!r}"]
    lines += [f"  member {m['worker_id']} gen {m.get('generation')} step {m.get('step')}"
              for m in s.get("members", [])]
    lines += [f"  round {r.get('round')} {r.get('outcome')} {r.get('duration_seconds', 0):.3f} s "
              f"{sorted(r.get('members', []))} dropped {r.get('dropped', [])}" for r in s.get("recent_rounds", [])[-12:]]
    lines += [f"  event {e.get('kind')}: {e.get('text')}" for e in s.get("events", [])[-15:]]
    lines += [f"  result {m}" for m in run.get("member_results", [])]
    return "\n".join(lines)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("address")
    parser.add_argument("expression")
    parser.add_argument("--wait", type=float, default=0)
    parser.add_argument("--print", action="store_true")
    args = parser.parse_args()
    deadline = time.monotonic() + args.wait
    last_error = None
    while True:
        try:
            s = fetch(args.address)
            # The tests' own expressions; parenthesized, so that they may span lines.
            value = eval(f"(\n{args.expression}\n)", names(s))
            if args.print:
                print(json.dumps(value))
                return 0
            if value:
                return 0
            last_error = None
        except (OSError, json.JSONDecodeError) as e:  # not up yet, or restarting
            s, last_error = None, e
        except (KeyError, IndexError, TypeError, ValueError) as e:  # not there yet
            last_error = e
        if time.monotonic() >= deadline:
            print(f"status: not true{f' after {args.wait:g} s' if args.wait else ''}: "
                  f"{args.expression}", file=sys.stderr)
            if last_error is not None:
                print(f"  (last error: {last_error})", file=sys.stderr)
            if s is not None:
                print(summary(s), file=sys.stderr)
            return 1
        time.sleep(0.1)


if __name__ == "__main__":
    sys.exit(main())
