"""A throwaway Prometheus for the report commands' tests and bench (Debian's prometheus package).

`Prometheus(datadir, ...)` starts `prometheus` on a free loopback port over an existing TSDB
directory (blocks made by `promtool tsdb create-blocks-from openmetrics`) or with a scrape
configuration, waits until it is ready, and stops it on close().
"""
import os
import shutil
import signal
import socket
import subprocess
import time
import urllib.request


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def create_blocks(openmetrics_file, datadir):
    promtool = shutil.which("promtool")
    assert promtool, "promtool (Debian package prometheus) is required"
    r = subprocess.run([promtool, "tsdb", "create-blocks-from", "openmetrics", openmetrics_file,
                        datadir], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-2000:]


class Prometheus:
    def __init__(self, workdir, datadir, scrape_configs=None, scrape_interval="15s",
                 web_config=None, scheme="http"):
        prometheus = shutil.which("prometheus")
        assert prometheus, "prometheus (Debian package prometheus) is required"
        self.port = free_port()
        self.url = f"{scheme}://127.0.0.1:{self.port}"
        config = os.path.join(workdir, "prometheus.yml")
        with open(config, "w") as f:
            f.write(f"global:\n  scrape_interval: {scrape_interval}\n"
                    f"  evaluation_interval: {scrape_interval}\n")
            if scrape_configs:
                f.write("scrape_configs:\n" + scrape_configs)
        args = [prometheus, f"--config.file={config}", f"--storage.tsdb.path={datadir}",
                f"--web.listen-address=127.0.0.1:{self.port}",
                "--storage.tsdb.retention.time=30d", "--query.lookback-delta=5m"]
        if web_config:
            args.append(f"--web.config.file={web_config}")
        self.log = open(os.path.join(workdir, "prometheus.log"), "w+")
        self.proc = subprocess.Popen(args, stdout=self.log, stderr=subprocess.STDOUT,
                                     start_new_session=True)
        deadline = time.time() + 60
        while time.time() < deadline:
            if self.proc.poll() is not None:
                self.log.seek(0)
                raise AssertionError("prometheus exited: " + self.log.read()[-3000:])
            self.log.seek(0)
            if "Server is ready to receive web requests" in self.log.read():
                return
            time.sleep(0.2)
        raise AssertionError("prometheus did not become ready in 60 s")

    def close(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()

    def get(self, path):
        with urllib.request.urlopen(self.url + path, timeout=10) as r:
            return r.read()
