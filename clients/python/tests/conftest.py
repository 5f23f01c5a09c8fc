"""A real redis-server for the tests, spawned on a free port (no mocks), and a client
with a key prefix of its own for each test."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
import time
import uuid
from typing import Iterator

import pytest
import redis

import dtq


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Server:
    def __init__(self) -> None:
        if shutil.which("redis-server") is None:
            raise RuntimeError("redis-server not on PATH (apt-get install -y redis-server)")
        self.dir = tempfile.mkdtemp(prefix="dtq-pytest-")
        self.port = _free_port()
        self.proc = subprocess.Popen(
            ["redis-server", "--port", str(self.port), "--bind", "127.0.0.1", "--dir", self.dir,
             "--save", "", "--appendonly", "no", "--daemonize", "no",
             "--logfile", os.path.join(self.dir, "redis.log")])
        deadline = time.monotonic() + 10
        while True:
            try:
                if redis.Redis(port=self.port, socket_timeout=1).ping():
                    return
            except redis.ConnectionError:
                pass
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError("redis-server did not start")
            time.sleep(0.02)  # polling for the server to answer, bounded by the deadline

    def stop(self) -> None:
        self.proc.kill()
        self.proc.wait()
        shutil.rmtree(self.dir, ignore_errors=True)


@pytest.fixture(scope="session")
def server() -> Iterator[Server]:
    s = Server()
    yield s
    s.stop()


@pytest.fixture
def fresh_server() -> Iterator[Server]:
    """A server of the test's own, for tests that read server-wide counters."""
    s = Server()
    yield s
    s.stop()


@pytest.fixture
def rdb(server: Server) -> Iterator["redis.Redis[bytes]"]:
    r = redis.Redis(port=server.port)
    yield r
    r.close()


@pytest.fixture
def prefix() -> str:
    return "t-" + uuid.uuid4().hex[:12]


@pytest.fixture
def client(rdb: "redis.Redis[bytes]", prefix: str) -> dtq.Client:
    return dtq.Client(rdb, prefix=prefix)
