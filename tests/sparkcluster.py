"""A real Spark standalone cluster on 127.0.0.1, started from the installed pyspark.

``StandaloneCluster(workers=2)`` runs ``spark-class ...deploy.master.Master`` and one
``...deploy.worker.Worker`` per worker (one core each), waits until the master's JSON status
lists them all alive, and kills the whole process group on ``stop``. Used by
``tests/test_spark_cluster.py`` and ``bench/bench_engines.py --standalone``.
"""
from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def spark_home() -> Path | None:
    try:
        import pyspark
    except ImportError:
        return None
    home = Path(pyspark.__file__).resolve().parent
    return home if (home / "bin" / "spark-class").exists() else None


def unavailable() -> str | None:
    """Why no cluster can be started here (None: it can)."""
    if spark_home() is None:
        return "pyspark with its bin/spark-class is not installed"
    java = os.environ.get("JAVA_HOME")
    if not (java and os.access(os.path.join(java, "bin", "java"), os.X_OK)) and shutil.which("java") is None:
        return "no Java runtime"
    return None


class StandaloneCluster:
    def __init__(self, workers: int = 2, cores: int = 1, memory: str = "1g", pythonpath: str | None = None,
                 env: dict | None = None, timeout: float = 120):
        home = spark_home()
        self.logs = Path(tempfile.mkdtemp(prefix="rmqtool-spark-cluster-"))
        self.port, self.ui = free_port(), free_port()
        self.url = f"spark://127.0.0.1:{self.port}"
        self.workers = workers
        self.env = dict(os.environ, SPARK_HOME=str(home), SPARK_LOCAL_IP="127.0.0.1", SPARK_LOG_DIR=str(self.logs),
                        SPARK_WORKER_DIR=str(self.logs / "work"), PYSPARK_PYTHON=sys.executable,
                        SPARK_NO_DAEMONIZE="1", **(env or {}))
        if pythonpath:                     # executors import rmqtool from the same tree as the driver
            self.env["PYTHONPATH"] = pythonpath + os.pathsep + self.env.get("PYTHONPATH", "")
        self.procs: list[subprocess.Popen] = []
        spark_class = str(home / "bin" / "spark-class")
        try:
            self._start("master", [spark_class, "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1",
                                   "--port", str(self.port), "--webui-port", str(self.ui)])
            self._wait(lambda s: True, timeout, "the master")
            for i in range(workers):
                self._start(f"worker-{i}", [spark_class, "org.apache.spark.deploy.worker.Worker", self.url,
                                            "--host", "127.0.0.1", "--cores", str(cores), "--memory", memory,
                                            "--webui-port", str(free_port()),
                                            "--work-dir", str(self.logs / f"work-{i}")])
            self._wait(lambda s: s.get("aliveworkers", 0) >= workers, timeout, f"{workers} workers")
        except BaseException:
            self.stop()
            raise

    def _start(self, name: str, argv: list[str]) -> None:
        log = open(self.logs / f"{name}.log", "wb")
        self.procs.append(subprocess.Popen(argv, env=self.env, stdout=log, stderr=subprocess.STDOUT,
                                           start_new_session=True))

    def status(self) -> dict:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.ui}/json/", timeout=5) as r:
            return json.loads(r.read())

    def _wait(self, ready, timeout: float, what: str) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if any(p.poll() is not None for p in self.procs):
                break
            try:
                if ready(self.status()):
                    return
            except OSError:
                pass
            time.sleep(0.5)
        tail = "\n".join((p.read_text(errors="replace")[-1500:] for p in sorted(self.logs.glob("*.log"))))
        raise RuntimeError(f"Spark standalone cluster: {what} did not come up in {timeout:.0f} s\n{tail}")

    def stop(self) -> None:
        for p in self.procs:
            if p.poll() is None:
                try:
                    os.killpg(p.pid, signal.SIGTERM)
                except ProcessLookupError:
                    pass
        for p in self.procs:
            try:
                p.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait()
        self.procs = []
        shutil.rmtree(self.logs, ignore_errors=True)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.stop()
