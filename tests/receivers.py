"""Real servers for the tests: an HTTP webhook receiver (a thread, a TCP
port), and the Prometheus and Alertmanager servers from Debian's packages."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Optional

from isr.sinks.webhooks import SIGNATURE_HEADER, TIMESTAMP_HEADER, verify


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Receiver:
    """Collects JSON bodies; with `hmac_key`, answers 401 to a bad signature."""

    def __init__(self, port: Optional[int] = None, hmac_key: Optional[bytes] = None) -> None:
        self.port = port or free_port()
        self.url = f"http://127.0.0.1:{self.port}/hook"
        self.hmac_key = hmac_key
        self.bodies: list = []
        self.rejected = 0
        self.headers: list[dict] = []
        self._server: Optional[ThreadingHTTPServer] = None

    def start(self) -> "Receiver":
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):  # noqa: N802 - http.server's name
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                if outer.hmac_key is not None and not verify(
                        outer.hmac_key, body, self.headers.get(TIMESTAMP_HEADER),
                        self.headers.get(SIGNATURE_HEADER)):
                    outer.rejected += 1
                    self.send_response(401)
                    self.end_headers()
                    return
                outer.bodies.append(json.loads(body))
                outer.headers.append(dict(self.headers))
                self.send_response(200)
                self.end_headers()

            def log_message(self, *args):  # quiet
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None


class Alertmanager:
    """prometheus-alertmanager (Debian), forwarding every alert group to
    `webhook_url` at once and again when it resolves."""

    def __init__(self, webhook_url: str, resolve_timeout: str = "5m") -> None:
        self.binary = shutil.which("prometheus-alertmanager") or shutil.which("alertmanager")
        if self.binary is None:
            raise RuntimeError("prometheus-alertmanager is not installed (.ci/run installs it)")
        self.port, self.cluster_port = free_port(), free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.dir = tempfile.mkdtemp(prefix="isr-am-")
        with open(os.path.join(self.dir, "am.yml"), "w") as f:
            f.write(f"""
global:
  resolve_timeout: {resolve_timeout}
route:
  receiver: test
  group_by: ['...']
  group_wait: 0s
  group_interval: 1s
  repeat_interval: 1h
receivers:
  - name: test
    webhook_configs:
      - url: {webhook_url}
        send_resolved: true
""")
        self.proc: Optional[subprocess.Popen] = None

    def __enter__(self) -> "Alertmanager":
        self.proc = subprocess.Popen(
            [self.binary, f"--config.file={self.dir}/am.yml", f"--storage.path={self.dir}",
             f"--web.listen-address=127.0.0.1:{self.port}",
             f"--cluster.listen-address=127.0.0.1:{self.cluster_port}"],
            stdout=subprocess.DEVNULL, stderr=open(os.path.join(self.dir, "log"), "w"))
        wait_ready(self.url, self.dir)
        return self

    def __exit__(self, *exc) -> None:
        stop(self.proc, self.dir)


def wait_ready(url: str, workdir: str, seconds: float = 30) -> None:
    """Until the server at `url` answers /-/ready (Prometheus and Alertmanager)."""
    import httpx

    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"{url}/-/ready", timeout=1).status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(0.2)
    raise RuntimeError(open(os.path.join(workdir, "log")).read()[-2000:])


def stop(proc: Optional[subprocess.Popen], workdir: str) -> None:
    if proc is not None:
        proc.terminate()
        proc.wait(10)
    shutil.rmtree(workdir, ignore_errors=True)


class Prometheus:
    """Debian's prometheus scraping `target` (host:port, or a list) every
    second and evaluating the rules of conf/prometheus/rules.yml every second."""

    def __init__(self, target, rules: str, port: Optional[int] = None,
                 brokers: Optional[list[str]] = None, cluster: str = "default") -> None:
        """`brokers`: the brokers' JMX exporters, scraped by a job of their own
        whose target label `cluster` names their cluster (docs/real-kafka.md)."""
        targets = [target] if isinstance(target, str) else list(target)
        self.dir = tempfile.mkdtemp(prefix="isr-prom-")
        self.port = port or free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        shutil.copy(rules, os.path.join(self.dir, "rules.yml"))
        with open(os.path.join(self.dir, "prometheus.yml"), "w") as f:
            f.write(f"""
global:
  scrape_interval: 1s
  evaluation_interval: 1s
rule_files: [rules.yml]
scrape_configs:
  - job_name: isr-monitor
    static_configs:
      - targets: {json.dumps(targets)}
""")
            if brokers:
                f.write(f"""  - job_name: kafka-brokers
    static_configs:
      - targets: {json.dumps(brokers)}
        labels: {{cluster: {json.dumps(cluster)}}}
""")
        self.proc: Optional[subprocess.Popen] = None

    def __enter__(self) -> "Prometheus":
        self.proc = subprocess.Popen(
            ["prometheus", f"--config.file={self.dir}/prometheus.yml",
             f"--storage.tsdb.path={self.dir}/data",
             f"--web.listen-address=127.0.0.1:{self.port}"],
            stdout=subprocess.DEVNULL, stderr=open(os.path.join(self.dir, "log"), "w"))
        wait_ready(self.url, self.dir)
        return self

    def query(self, expr: str) -> list:
        import httpx

        body = httpx.get(f"{self.url}/api/v1/query", params={"query": expr}, timeout=10).json()
        assert body["status"] == "success", (expr, body)
        return body["data"]["result"]

    def __exit__(self, *exc) -> None:
        stop(self.proc, self.dir)
