#!/usr/bin/python3
"""A throwaway Prometheus server (Debian's prometheus) on a data directory, for tests and benches.

Command line (DIR holds everything: data/, prometheus.yml, prometheus.log, prometheus.pid,
prometheus.url, truth.json):

    throwaway_prometheus.py fill DIR [make_openmetrics.py options] [--backfill-rules RULES.yml]
        Generates synthetic `sonde serve --per-job` data (make_openmetrics.py: --nodes --jobs
        --duration --step --end ...) and backfills it into DIR/data with promtool; writes the
        ground truth to DIR/truth.json. --backfill-rules also evaluates RULES' recording rules over
        the data (promtool tsdb create-blocks-from rules) and adds their blocks to DIR/data.
    throwaway_prometheus.py start DIR [--rules RULES.yml ...] [--port N]
        Starts prometheus on DIR/data (no scraping; rules loaded if given), waits until it is
        ready and prints its URL (http://127.0.0.1:PORT) on stdout. It keeps running.
    throwaway_prometheus.py stop DIR
        Stops the server started on DIR (SIGTERM, SIGKILL after 10 s).
    throwaway_prometheus.py run DIR [--rules RULES.yml ...] -- COMMAND [ARGS...]
        start, run COMMAND with PROMETHEUS_URL set in its environment, stop; exits with
        COMMAND's status.

From Python (sys.path gets this directory):

    from throwaway_prometheus import ThrowawayPrometheus, fill
    truth = fill(dir, nodes=3, jobs=2, duration=3600, step=15)      # dict, as truth.json
    with ThrowawayPrometheus(dir, rule_files=[...]) as prom:
        prom.url; prom.query(expr, t=None); prom.query_range(expr, start, end, step)
        prom.label_values("jobid", match="sonde_job_processes")

Errors (no prometheus/promtool, a server that does not become ready) raise
PrometheusError with the server's log tail.
"""
import argparse
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import make_openmetrics  # noqa: E402


class PrometheusError(RuntimeError):
    pass


def _tool(name):
    path = shutil.which(name)
    if not path:
        raise PrometheusError(f"{name} not found: install Debian's prometheus package "
                              "(scripts/install-deps --tests)")
    return path


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _run(args, what):
    proc = subprocess.run(args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if proc.returncode != 0:
        raise PrometheusError(f"{what} failed (exit {proc.returncode}): {' '.join(args)}\n{proc.stdout[-3000:]}")
    return proc.stdout


def backfill_openmetrics(openmetrics_file, data_dir):
    """promtool tsdb create-blocks-from openmetrics FILE DATA_DIR."""
    os.makedirs(data_dir, exist_ok=True)
    _run([_tool("promtool"), "tsdb", "create-blocks-from", "openmetrics", openmetrics_file, data_dir],
         f"backfilling {openmetrics_file}")


def fill(directory, backfill_rules=None, keep_openmetrics=False, **options):
    """Generates synthetic data into DIRECTORY/data; returns (and writes) the ground truth.

    options: make_openmetrics.py's options as keywords (nodes=3, jobs=2, duration=3600, step=15,
    end=None, nodes_per_job=0, cpus_per_node=64, gpus_per_node=4, memory_per_node_gib=256,
    per_cpu=False)."""
    parser = argparse.ArgumentParser()
    make_openmetrics.add_arguments(parser)
    args = parser.parse_args([])
    for key, value in options.items():
        if not hasattr(args, key):
            raise TypeError(f"fill(): unknown option {key!r}")
        setattr(args, key, value)
    make_openmetrics.check_arguments(parser, args)
    os.makedirs(directory, exist_ok=True)
    data = os.path.join(directory, "data")
    om = os.path.join(directory, "data.om")
    with open(om, "w", buffering=1 << 20) as out:
        truth = make_openmetrics.generate(make_openmetrics.Cluster(args), out)
    try:
        backfill_openmetrics(om, data)
    finally:
        if not keep_openmetrics:
            os.unlink(om)
    if backfill_rules:
        backfill_recording_rules(directory, backfill_rules, truth["start"], truth["end"])
    with open(os.path.join(directory, "truth.json"), "w") as f:
        json.dump(truth, f, indent=1)
    return truth


def backfill_recording_rules(directory, rules_file, start, end, interval=60):
    """Evaluates RULES_FILE's recording rules over [start, end] against the data in
    DIRECTORY/data and adds the resulting blocks to it (promtool tsdb create-blocks-from rules).
    promtool cannot backfill a rule that reads another recorded series."""
    out = tempfile.mkdtemp(prefix="rules-", dir=directory)
    try:
        with ThrowawayPrometheus(directory) as prom:
            _run([_tool("promtool"), "tsdb", "create-blocks-from", "rules", f"--start={start}",
                  f"--end={end}", f"--eval-interval={interval}s", f"--url={prom.url}",
                  f"--output-dir={out}", rules_file], f"backfilling the rules of {rules_file}")
        data = os.path.join(directory, "data")
        for block in os.listdir(out):
            if os.path.isfile(os.path.join(out, block, "meta.json")):
                os.rename(os.path.join(out, block), os.path.join(data, block))
    finally:
        shutil.rmtree(out, ignore_errors=True)


class ThrowawayPrometheus:
    """prometheus --storage.tsdb.path=DIR/data on 127.0.0.1, no scraping; a context manager."""

    def __init__(self, directory, rule_files=(), port=None, ready_timeout=60):
        self.directory = os.path.abspath(directory)
        self.rule_files = [os.path.abspath(r) for r in rule_files]
        self.port = port
        self.ready_timeout = ready_timeout
        self.process = None
        self.url = None

    # -- lifetime
    def start(self):
        prometheus = _tool("prometheus")
        os.makedirs(os.path.join(self.directory, "data"), exist_ok=True)
        config = os.path.join(self.directory, "prometheus.yml")
        with open(config, "w") as f:
            f.write("global:\n  evaluation_interval: 15s\n")
            if self.rule_files:
                f.write("rule_files:\n" + "".join(f"  - {json.dumps(r)}\n" for r in self.rule_files))
        log_path = os.path.join(self.directory, "prometheus.log")
        for attempt in range(5):
            port = self.port or _free_port()
            log = open(log_path, "w")
            self.process = subprocess.Popen(
                [prometheus, f"--config.file={config}",
                 f"--storage.tsdb.path={os.path.join(self.directory, 'data')}",
                 "--storage.tsdb.retention.time=100y",
                 f"--web.listen-address=127.0.0.1:{port}"],
                stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
            log.close()
            self.url = f"http://127.0.0.1:{port}"
            if self._wait_ready():
                with open(os.path.join(self.directory, "prometheus.pid"), "w") as f:
                    f.write(f"{self.process.pid}\n")
                with open(os.path.join(self.directory, "prometheus.url"), "w") as f:
                    f.write(self.url + "\n")
                return self
            returncode = self.process.poll()
            if returncode is None:
                self.stop()
                break
            if self.port or "address already in use" not in self.log_tail():
                break
        raise PrometheusError(f"prometheus on {self.directory} did not become ready within "
                              f"{self.ready_timeout} s; log:\n{self.log_tail()}")

    def _wait_ready(self):
        deadline = time.monotonic() + self.ready_timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                return False
            try:
                with urllib.request.urlopen(self.url + "/-/ready", timeout=2) as r:
                    if r.status == 200:
                        return True
            except (urllib.error.URLError, ConnectionError, OSError):
                pass
            time.sleep(0.2)
        return False

    def stop(self):
        if self.process and self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        for name in ("prometheus.pid", "prometheus.url"):
            try:
                os.unlink(os.path.join(self.directory, name))
            except FileNotFoundError:
                pass
        self.process = None

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()

    def log_tail(self, chars=3000):
        try:
            with open(os.path.join(self.directory, "prometheus.log")) as f:
                return f.read()[-chars:]
        except OSError:
            return "(no log)"

    # -- HTTP API
    def api(self, path, **params):
        url = f"{self.url}/api/v1/{path}?" + urllib.parse.urlencode(params, doseq=True)
        try:
            with urllib.request.urlopen(url, timeout=60) as r:
                body = json.load(r)
        except urllib.error.HTTPError as e:
            body = json.load(e)
        if body.get("status") != "success":
            raise PrometheusError(f"{path} {params}: {body.get('errorType')}: {body.get('error')}")
        return body["data"]

    def query(self, expr, t=None):
        params = {"query": expr}
        if t is not None:
            params["time"] = t
        return self.api("query", **params)["result"]

    def query_range(self, expr, start, end, step):
        return self.api("query_range", query=expr, start=start, end=end, step=step)["result"]

    def label_values(self, label, match=None):
        params = {"match[]": match} if match else {}
        return self.api(f"label/{label}/values", **params)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    p_fill = sub.add_parser("fill", help="generate synthetic data and backfill it into DIR/data")
    p_fill.add_argument("dir")
    make_openmetrics.add_arguments(p_fill)
    p_fill.add_argument("--backfill-rules", help="also backfill this file's recording rules")
    p_fill.add_argument("--keep-openmetrics", action="store_true", help="keep DIR/data.om")
    for name, help_text in (("start", "start prometheus on DIR/data and print its URL"),
                            ("run", "start, run a command with PROMETHEUS_URL, stop")):
        p = sub.add_parser(name, help=help_text)
        p.add_argument("dir")
        p.add_argument("--rules", action="append", default=[], help="a rule file to load (repeatable)")
        p.add_argument("--port", type=int, default=None, help="default: a free port")
        if name == "run":
            p.add_argument("cmd", nargs=argparse.REMAINDER)
    p_stop = sub.add_parser("stop", help="stop the server started on DIR")
    p_stop.add_argument("dir")
    args = parser.parse_args(argv)

    try:
        if args.command == "fill":
            make_openmetrics.check_arguments(p_fill, args)
            options = {k: v for k, v in vars(args).items()
                       if k not in ("command", "dir", "backfill_rules", "keep_openmetrics")}
            truth = fill(args.dir, backfill_rules=args.backfill_rules,
                         keep_openmetrics=args.keep_openmetrics, **options)
            print(f"{args.dir}/data: {truth['samples']} samples from {truth['start']} to {truth['end']}, "
                  f"{len(truth['jobs'])} jobs; ground truth in {args.dir}/truth.json")
            return 0
        if args.command == "stop":
            pid_file = os.path.join(args.dir, "prometheus.pid")
            try:
                pid = int(open(pid_file).read())
            except (OSError, ValueError):
                print(f"throwaway_prometheus: no server started on {args.dir} ({pid_file})", file=sys.stderr)
                return 1
            try:
                with open(f"/proc/{pid}/cmdline", "rb") as f:
                    cmdline = f.read().split(b"\0")
            except OSError:
                cmdline = []
            data_flag = f"--storage.tsdb.path={os.path.join(os.path.abspath(args.dir), 'data')}".encode()
            if data_flag not in cmdline:  # gone, or the pid was reused: nothing of ours to stop
                print(f"throwaway_prometheus: process {pid} is not prometheus on {args.dir}; removing {pid_file}",
                      file=sys.stderr)
                os.unlink(pid_file)
                return 1
            os.kill(pid, signal.SIGTERM)
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline:
                try:
                    os.kill(pid, 0)
                except ProcessLookupError:
                    break
                time.sleep(0.1)
            else:
                os.kill(pid, signal.SIGKILL)
            for name in ("prometheus.pid", "prometheus.url"):
                try:
                    os.unlink(os.path.join(args.dir, name))
                except FileNotFoundError:
                    pass
            return 0
        prom = ThrowawayPrometheus(args.dir, rule_files=args.rules, port=args.port)
        if args.command == "start":
            prom.start()
            print(prom.url)
            return 0
        cmd = args.cmd[1:] if args.cmd[:1] == ["--"] else args.cmd
        if not cmd:
            parser.error("run: no command after --")
        with prom:
            return subprocess.call(cmd, env=dict(os.environ, PROMETHEUS_URL=prom.url))
    except PrometheusError as e:
        print(f"throwaway_prometheus: {e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
