"""Checks the coordinator's status page in headless Chromium against /status (see
tests/status_page_test.sh)."""

import argparse
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import time
import urllib.request

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "testutil"))
import cdp  # noqa: E402

FMNIST = "/usr/share/datasets/fashion-mnist"
# Long enough that the run is watched live for several heartbeats (with OpenBLAS the two
# workers train about 300 steps a second each).
TOTAL_STEPS = 4000


class Failure(Exception):
    pass


def wait_for(what, predicate, seconds):
    deadline = time.time() + seconds
    while True:
        value = predicate()
        if value:
            return value
        if time.time() > deadline:
            raise Failure(f"{what}: not within {seconds} s")
        time.sleep(0.25)


class Check:
    def __init__(self, args):
        self.args = args
        self.procs = []
        self.work = args.work
        open(f"{self.work}/token", "w").write("page-token")

    def spawn(self, name, argv):
        out = open(f"{self.work}/{name}.out", "w")
        proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT)
        self.procs.append(proc)
        return proc

    def get(self, path):
        with urllib.request.urlopen(f"http://{self.http}{path}", timeout=10) as r:
            return r.read().decode()

    def status(self):
        return json.loads(self.get("/status"))

    def promtool(self, when):
        metrics = self.get("/metrics")
        path = f"{self.work}/metrics-{when}.txt"
        open(path, "w").write(metrics)
        result = subprocess.run(["promtool", "check", "metrics"], input=metrics,
                                capture_output=True, text=True)
        if result.returncode != 0:
            raise Failure(f"promtool check metrics ({when}) failed:\n{result.stdout}{result.stderr}")
        # Members during the run; the run's final accuracy after it (the members left).
        for name in ["localsgd_round_duration_seconds_bucket", "localsgd_rounds_total",
                     "localsgd_round_members_dropped_total", "localsgd_received_bytes_total",
                     "localsgd_run_total_steps", "localsgd_last_commit_timestamp_seconds",
                     "process_cpu_seconds_total", "process_resident_memory_bytes",
                     "process_open_fds",
                     "localsgd_member_step" if when == "during"
                     else "localsgd_run_final_test_accuracy"]:
            if name not in metrics:
                raise Failure(f"/metrics ({when}) has no {name}")
        print(f"promtool check metrics passed {when} the run", flush=True)

    def start(self, spec):
        open(f"{self.work}/spec.textproto", "w").write(spec)
        result = subprocess.run(
            [f"{self.args.bin}/coordinator/localsgdctl", f"--coordinator={self.grpc}",
             f"--token_file={self.work}/token", "start", f"--spec={self.work}/spec.textproto"],
            capture_output=True, text=True)
        if result.returncode != 0:
            raise Failure(f"localsgdctl start failed: {result.stderr}")

    def worker(self, name, node, num_nodes):
        return self.spawn(name, [
            f"{self.args.bin}/worker/worker", f"--coordinator={self.grpc}",
            f"--token_file={self.work}/token", f"--node_name=node-{node}",
            f"--node_rank={node}", f"--num_nodes={num_nodes}", "--local_rank=0",
            "--local_world_size=1", f"--rendezvous_dir={self.work}/rdv",
            f"--save_model={self.work}/model.pt", "--log_every=100000"])

    def page_numbers(self, browser, fresh=False):
        """The numbers the page shows; `fresh`: after making the page refresh itself from the
        server once more (it does so once a second on its own)."""
        read = """() => {
          const text = id => (document.getElementById(id) || {}).textContent;
          return {state: text('run-state'), run: text('run-id'), round: Number(text('round')),
                  step: Number(text('global-step')), members: Number(text('members-count')),
                  accuracy: text('accuracy'),
                  loss_points: Number(document.getElementById('chart-loss').dataset.points),
                  accuracy_points:
                      Number(document.getElementById('chart-accuracy').dataset.points),
                  events: [...document.querySelectorAll('#events li')].map(
                      li => [li.className, li.textContent])};
        }"""
        if fresh:
            return browser.evaluate(f"(async () => {{ await refresh(); return ({read})(); }})()")
        return browser.evaluate(f"({read})()")

    def page_shape(self, browser):
        """What the page draws: per chart its points, tick labels and axis titles, the waiting
        share, legends and bar titles; the members' rows, the join events, and how many lines
        each run id takes."""
        return browser.evaluate("""(() => {
          const charts = {};
          for (const svg of document.querySelectorAll('.charts svg')) {
            const figure = svg.closest('figure');
            charts[svg.id] = {
              points: Number(svg.dataset.points),
              x_ticks: [...svg.querySelectorAll('text.tick[text-anchor=middle]')].map(t => t.textContent),
              y_ticks: [...svg.querySelectorAll('text.tick[text-anchor=end]')].map(t => t.textContent),
              x_title: (svg.querySelector('.x-title') || {}).textContent,
              y_title: (svg.querySelector('.y-title') || {}).textContent,
              legend: [...figure.querySelectorAll('.legend .entry')].map(e => e.textContent.trim()),
              bars: [...svg.querySelectorAll('rect title')].map(t => t.textContent),
              marks: [...svg.querySelectorAll('circle title')].map(t => t.textContent),
            };
          }
          const lines = el => {
            const range = document.createRange();
            range.selectNodeContents(el);
            return new Set([...range.getClientRects()].map(r => Math.round(r.top))).size;
          };
          const share = document.getElementById('waiting-share');
          return {
            charts,
            waiting_share: share ? share.textContent : null,
            waiting_share_visible: share ? share.getBoundingClientRect().height > 0 : false,
            members: [...document.querySelectorAll('#members tbody tr')].map(
                tr => [...tr.children].map(td => td.textContent)),
            joins: [...document.querySelectorAll('#events li[data-kind=worker_joined]')].map(
                li => li.textContent),
            run_id_lines: [...document.querySelectorAll('#runs tbody tr td:first-child')].map(lines),
          };
        })()""")

    def check_shape(self, browser, when, exchange_sharded):
        """The page is readable: axis titles and several labelled ticks on every chart with
        data, the waiting share shown, the bytes chart naming only what moved (per exchange
        mode), one join event per worker with its real host, and run ids on one line."""
        shape = self.page_shape(browser)
        for chart_id, chart in shape["charts"].items():
            if chart["points"] == 0:
                continue
            if chart["x_title"] != "global step" or not chart["y_title"]:
                raise Failure(f"{when}: {chart_id} has axis titles {chart['x_title']!r}, "
                              f"{chart['y_title']!r}")
            for axis in ("x_ticks", "y_ticks"):
                ticks = chart[axis]
                if len(ticks) < 3 or len(set(ticks)) != len(ticks) or not all(ticks):
                    raise Failure(f"{when}: {chart_id} {axis} are {ticks}: not 3 or more "
                                  "distinct labels")
        if not shape["waiting_share_visible"] or not re.fullmatch(r"\d+\.\d%",
                                                                  shape["waiting_share"] or ""):
            raise Failure(f"{when}: the waiting share is not shown: {shape['waiting_share']!r}")
        time_legend = shape["charts"]["chart-round-time"]["legend"]
        if not time_legend or "waiting for the slowest" not in time_legend[0]:
            raise Failure(f"{when}: the round-time chart does not show waiting first: {time_legend}")
        bytes_chart = shape["charts"]["chart-bytes"]
        zero = [t for t in bytes_chart["bars"] if t.endswith(" 0 B")]
        wanted = "range owners received (data plane)" if exchange_sharded else "coordinator sent"
        if zero or not any(entry.endswith(wanted) for entry in bytes_chart["legend"]):
            raise Failure(f"{when}: the bytes chart shows {bytes_chart['legend']} (bars of 0 B: "
                          f"{zero[:3]}); wanted {wanted!r}")
        host = socket.gethostname()
        joined = sorted(re.search(r"worker (\S+) joined", j).group(1) for j in shape["joins"])
        if joined != ["node-0/0", "node-1/0"] or not all(f"host {host}," in j for j in shape["joins"]):
            raise Failure(f"{when}: join events are not one per worker with host {host}: "
                          f"{shape['joins']}")
        if any(n != 1 for n in shape["run_id_lines"]):
            raise Failure(f"{when}: run ids take {shape['run_id_lines']} lines")
        return shape

    def run(self):
        coord = self.spawn("coordinator", [
            f"{self.args.bin}/coordinator/coordinator", "--grpc_address=127.0.0.1:0",
            "--http_address=127.0.0.1:0", f"--token_file={self.work}/token"])
        log = f"{self.work}/coordinator.out"
        self.grpc = wait_for("the coordinator's gRPC port", lambda: (re.findall(
            r"grpc listening on (\S+)", open(log).read()) or [None])[0], 30)
        self.http = wait_for("the coordinator's HTTP port", lambda: (re.findall(
            r"http listening on (\S+)", open(log).read()) or [None])[0], 30)
        browser = cdp.Browser()
        try:
            browser.navigate(f"http://{self.http}/")
            # Rendered on the server: the numbers are there before any script ran.
            first = self.page_numbers(browser)
            if first["run"] != "(none)" or first["state"] != "IDLE":
                raise Failure(f"a fresh coordinator's page shows {first}")
            self.check_training_run(browser)
            self.check_monitoring_folder()
            self.check_failed_run(browser)
        finally:
            browser.close()
        coord.terminate()
        if coord.wait(timeout=30) != 0:
            raise Failure(f"the coordinator exited {coord.returncode} on SIGTERM")

    def check_training_run(self, browser):
        self.start(f"""
name: "page-test"
model {{ builtin: "mlp" }}
dataset {{ kind: DATASET_KIND_FASHION_MNIST path: "{FMNIST}" }}
local_sgd_steps: 16
total_steps: {TOTAL_STEPS}
batch_size: 64
min_workers: 2
eval_every_rounds: 5
optimizer {{ lr: 0.05 momentum: 0.9 }}
""")
        workers = [self.worker(f"w{n}", n, 2) for n in range(2)]
        # Charted live: at least two rounds on the loss chart while the run goes on.
        def charted():
            numbers = self.page_numbers(browser)
            return numbers if numbers["loss_points"] >= 2 and numbers["state"] == "RUNNING" \
                else None
        wait_for("two rounds charted during the run", charted, 240)
        # The page's numbers against /status read just before and after (the run moves on).
        before = self.status()
        numbers = self.page_numbers(browser, fresh=True)
        after = self.status()
        run_before, run_after = before["run"], after["run"]
        if not int(run_before["round"]) <= numbers["round"] <= int(run_after["round"]):
            raise Failure(f"page round {numbers['round']} not within /status's "
                          f"{run_before['round']}..{run_after['round']}")
        if not int(run_before["global_step"]) <= numbers["step"] <= int(run_after["global_step"]):
            raise Failure(f"page global step {numbers['step']} not within /status's "
                          f"{run_before['global_step']}..{run_after['global_step']}")
        if numbers["members"] != len(after["members"]) or numbers["run"] != run_after["run_id"]:
            raise Failure(f"page shows {numbers}, /status {len(after['members'])} members of "
                          f"{run_after['run_id']}")
        # Accuracy, once the workers evaluated: the mean of the members' latest, as /status
        # had it just before or just after.
        def mean_accuracy(status):
            values = [m["test_accuracy"] for m in status["members"] if m["test_accuracy"] > 0]
            return f"{sum(values) / len(values):.4f}" if values else "-"
        if numbers["accuracy"] not in (mean_accuracy(before), mean_accuracy(after)):
            raise Failure(f"page accuracy {numbers['accuracy']}, /status "
                          f"{mean_accuracy(before)}..{mean_accuracy(after)}")
        series = json.loads(self.get(f"/runs/{run_after['run_id']}/series"))
        if len(series["points"]) < 2:
            raise Failure(f"/runs/ID/series has {len(series['points'])} points")
        self.promtool("during")
        sharded = run_after["spec"].get("exchange", "EXCHANGE_UNSPECIFIED") != "EXCHANGE_STAR"
        self.check_shape(browser, "during the run", sharded)
        # The screenshot half-way, with evaluations charted too (or at the end).
        wait_for("half of the run", lambda: (
            lambda n: n["step"] >= TOTAL_STEPS // 2 or n["state"] != "RUNNING")(
                self.page_numbers(browser)), 300)
        before = self.status()
        halfway = self.page_numbers(browser, fresh=True)
        after = self.status()
        if halfway["state"] == "RUNNING" and \
                halfway["accuracy"] not in (mean_accuracy(before), mean_accuracy(after)):
            raise Failure(f"half-way, page accuracy {halfway['accuracy']}, /status "
                          f"{mean_accuracy(before)}..{mean_accuracy(after)}")
        browser.screenshot(f"{self.args.out}/page-during-run.png")
        print(f"during the run: page {numbers['round']} rounds, global step {numbers['step']}, "
              f"{numbers['members']} members, {numbers['loss_points']} points charted; half-way "
              f"test accuracy {halfway['accuracy']}", flush=True)

        for w in workers:
            if w.wait(timeout=600) != 0:
                raise Failure(f"a worker exited {w.returncode}: "
                              + open(f"{self.work}/w0.out").read()[-2000:])
        status = wait_for("the run's final accuracy in status", lambda: (
            lambda s: s if s["run"]["state"] == "RUN_STATE_COMPLETED"
            and s["run"]["final_test_accuracy"] > 0 else None)(self.status()), 30)
        final = status["run"]
        # The page updates itself once a second: it shows the end without a reload.
        expected = f"{final['final_test_accuracy']:.4f}"
        done = wait_for("the page showing the completed run", lambda: (
            lambda n: n if n["state"] == "COMPLETED" and n["accuracy"] == expected
            and n["round"] == int(final["round"]) else None)(self.page_numbers(browser)), 30)
        if done["accuracy_points"] < 1:
            raise Failure("no test accuracy charted")
        # After the end: the final evaluation charted, the members' last figures kept, and the
        # waiting share the series' own.
        shape = self.check_shape(browser, "after the run", sharded)
        mark = f"final model: {expected} at step {final['global_step']}"
        if mark not in shape["charts"]["chart-accuracy"]["marks"]:
            raise Failure(f"the accuracy chart lacks {mark!r}: "
                          f"{shape['charts']['chart-accuracy']['marks']}")
        rows = {row[0].rstrip(" \u2605"): row for row in shape["members"]}
        for worker in ("node-0/0", "node-1/0"):
            row = rows.get(worker)
            if not row or row[1] != socket.gethostname() or not re.fullmatch(r"\d+\.\d", row[4]):
                raise Failure(f"after the run, member {worker}'s row lost its figures: {row}")
        points = json.loads(self.get(f"/runs/{final['run_id']}/series"))["points"]
        waited = sum(min(p.get("slowest_wait_seconds", 0), p.get("duration_seconds", 0))
                     for p in points)
        total = sum(p.get("duration_seconds", 0) for p in points)
        if shape["waiting_share"] != f"{100 * waited / total:.1f}%":
            raise Failure(f"waiting share {shape['waiting_share']}, the series' "
                          f"{100 * waited / total:.1f}%")
        self.promtool("after")
        browser.screenshot(f"{self.args.out}/page-after-run.png")
        print(f"after the run: page shows COMPLETED, round {done['round']}, test accuracy "
              f"{done['accuracy']} (status {final['final_test_accuracy']:.4f}) charted as the "
              f"final model's; waiting {shape['waiting_share']} of round time; bytes chart: "
              f"{shape['charts']['chart-bytes']['legend']}; members kept: "
              f"{[r[:5] for r in shape['members']]}", flush=True)

    def check_monitoring_folder(self):
        """deploy/monitoring: a valid Prometheus config, and a Grafana dashboard whose every
        metric is one /metrics served during or after the run."""
        folder = f"{self.args.bin}/deploy/monitoring"
        result = subprocess.run(["promtool", "check", "config", f"{folder}/prometheus.yml"],
                                capture_output=True, text=True)
        if result.returncode != 0:
            raise Failure(f"promtool check config: {result.stdout}{result.stderr}")
        served = open(f"{self.work}/metrics-during.txt").read() + \
            open(f"{self.work}/metrics-after.txt").read()
        dashboard = json.load(open(f"{folder}/grafana-dashboard.json"))
        used = set()
        for panel in dashboard["panels"]:
            for target in panel["targets"]:
                used |= set(re.findall(r"\b(?:localsgd|process)_[a-z_]+", target["expr"]))
        missing = sorted(name for name in used if not re.search(rf"^{name}[{{ ]", served, re.M))
        if missing:
            raise Failure(f"the Grafana dashboard uses metrics /metrics does not serve: {missing}")
        print(f"deploy/monitoring: prometheus.yml valid, the dashboard's {len(used)} metrics "
              "all served", flush=True)

    def check_failed_run(self, browser):
        self.start("""
name: "bad-data"
model { builtin: "mlp" }
dataset { kind: DATASET_KIND_FASHION_MNIST path: "/nonexistent/fashion" }
min_workers: 1
""")
        worker = self.worker("bad", 0, 1)
        if worker.wait(timeout=120) == 0:
            raise Failure("the worker with a bad dataset path exited 0")
        error = [l for l in open(f"{self.work}/bad.out").read().splitlines()
                 if "dataset.path" in l][-1]
        message = error[error.index("dataset.path"):]
        def failure_shown():
            numbers = self.page_numbers(browser)
            shown = [text for cls, text in numbers["events"] if cls == "error" and message in text]
            return numbers if numbers["state"] == "FAILED" and shown else None
        numbers = wait_for("the worker's failure on the page", failure_shown, 30)
        reason = browser.evaluate("document.getElementById('run-reason').textContent")
        if message not in reason:
            raise Failure(f"the run's reason on the page does not say why: {reason}")
        browser.screenshot(f"{self.args.out}/page-failed-run.png")
        runs = json.loads(self.get("/runs"))["runs"]
        if [r["state"] for r in runs] != ["RUN_STATE_FAILED", "RUN_STATE_COMPLETED"]:
            raise Failure(f"/runs lists {[r['state'] for r in runs]}")
        print(f"failed run: page shows FAILED with \"{message}\"", flush=True)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--bin", required=True)
    parser.add_argument("--work", required=True)
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    check = Check(args)
    try:
        check.run()
        print("status page: every check passed", flush=True)
        return 0
    except Failure as f:
        print(f"status page: FAILED: {f}", file=sys.stderr, flush=True)
        for name in ["coordinator", "w0", "w1", "bad"]:
            path = f"{args.work}/{name}.out"
            if os.path.exists(path):
                print(f"--- {name} (last lines)\n" + "".join(open(path).readlines()[-15:]),
                      file=sys.stderr)
        return 1
    finally:
        for proc in check.procs:
            if proc.poll() is None:
                proc.kill()


if __name__ == "__main__":
    sys.exit(main())
