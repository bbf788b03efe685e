"""A local S3-compatible server for the tests: moto in server mode on 127.0.0.1.

``S3Server`` starts it on a free port, gives the environment that points pyarrow (and any
child process: the CLI, Spark executors) at it, and uploads local trees with boto3.
"""
from __future__ import annotations

import os
import socket
from pathlib import Path

ACCESS_KEY, SECRET_KEY = "testing-key", "testing-secret"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class S3Server:
    def __init__(self, free_actions: int | None = None):
        """``free_actions``: a server (in its own process) that answers that many requests without
        checking credentials, then refuses every request whose key its IAM does not know."""
        self.port = free_port()
        self.endpoint = f"http://127.0.0.1:{self.port}"
        self._server = self._proc = None
        if free_actions is None:
            from moto.server import ThreadedMotoServer
            self._server = ThreadedMotoServer(ip_address="127.0.0.1", port=self.port)
            self._server.start()
        else:
            import subprocess
            import sys
            import time
            env = dict(os.environ, INITIAL_NO_AUTH_ACTION_COUNT=str(free_actions))
            self._proc = subprocess.Popen([sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p",
                                           str(self.port)], env=env, stdout=subprocess.DEVNULL,
                                          stderr=subprocess.DEVNULL)
            deadline = time.monotonic() + 30
            while True:
                try:
                    socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
                    break
                except OSError:
                    if time.monotonic() > deadline or self._proc.poll() is not None:
                        raise RuntimeError("moto server did not start")
                    time.sleep(0.1)
        self.client = self._client(ACCESS_KEY, SECRET_KEY)

    def _client(self, key: str, secret: str):
        import boto3
        return boto3.client("s3", endpoint_url=self.endpoint, region_name="us-east-1",
                            aws_access_key_id=key, aws_secret_access_key=secret)

    def env(self, **overrides) -> dict[str, str]:
        """The environment a process needs to read this server's buckets."""
        env = {"AWS_ENDPOINT_URL": self.endpoint, "AWS_ACCESS_KEY_ID": ACCESS_KEY,
               "AWS_SECRET_ACCESS_KEY": SECRET_KEY, "AWS_REGION": "us-east-1",
               "AWS_EC2_METADATA_DISABLED": "true"}
        env.update(overrides)
        return env

    def bucket(self, name: str) -> str:
        self.client.create_bucket(Bucket=name)
        return name

    def upload(self, local: Path, bucket: str, prefix: str) -> str:
        """Every file under ``local`` to ``s3://bucket/prefix/...``; returns that URI."""
        local = Path(local)
        for dirpath, _, files in os.walk(local):
            for f in files:
                path = Path(dirpath) / f
                if path.is_symlink():
                    continue
                key = f"{prefix}/{path.relative_to(local).as_posix()}"
                with open(path, "rb") as fh:
                    self.client.put_object(Bucket=bucket, Key=key, Body=fh.read())
        return f"s3://{bucket}/{prefix}"

    def put(self, bucket: str, key: str, data: bytes) -> None:
        self.client.put_object(Bucket=bucket, Key=key, Body=data)

    def stop(self) -> None:
        if self._server is not None:
            self._server.stop()
        if self._proc is not None:
            self._proc.kill()
            self._proc.wait()
