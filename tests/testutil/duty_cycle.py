#!/usr/bin/env python3
"""Slows a process down as a throttled or shared host would: lets it run RUN_MS of every
PERIOD_MS (SIGCONT, then SIGSTOP for the rest), until the process ends or this one is
terminated (it then leaves the process running).

    duty_cycle.py PID RUN_MS PERIOD_MS
"""
import os
import signal
import sys
import time


def main():
    pid, run_ms, period_ms = int(sys.argv[1]), float(sys.argv[2]), float(sys.argv[3])

    def release(*_):
        try:
            os.kill(pid, signal.SIGCONT)
        except ProcessLookupError:
            pass
        sys.exit(0)

    signal.signal(signal.SIGTERM, release)
    signal.signal(signal.SIGINT, release)
    try:
        while True:
            os.kill(pid, signal.SIGCONT)
            time.sleep(run_ms / 1000)
            os.kill(pid, signal.SIGSTOP)
            time.sleep((period_ms - run_ms) / 1000)
    except ProcessLookupError:
        pass


if __name__ == "__main__":
    main()
