"""Helpers for the cluster tests: a real etcd, `fjord serve` node processes joined to it, and the
`fjord cluster` CLI (docs/cluster.md)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from conftest import FjordServer, binary_path, free_port

LEASE_TTL_S = 2
# A killed node is down once etcd expires its lease: the TTL, plus etcd's own expiry check interval,
# plus one status poll. Generous, since the machine is shared.
DOWN_DEADLINE_S = LEASE_TTL_S + 15
UP_DEADLINE_S = 20


class Etcd:
    """One etcd member on loopback ports of its own, over a data directory of its own."""

    def __init__(self, work_dir: Path):
        self.work_dir = Path(work_dir)
        self.data_dir = self.work_dir / "etcd-data"
        self.log_path = self.work_dir / "etcd.log"
        self.client_port = free_port()
        self.peer_port = free_port()
        self.process: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.client_port}"

    def start(self):
        executable = shutil.which("etcd")
        if executable is None:
            pytest.fail("etcd not found: scripts/bootstrap.sh installs Debian's etcd-server", pytrace=False)
        peer = f"http://127.0.0.1:{self.peer_port}"
        command = [executable, "--name", "default", "--data-dir", str(self.data_dir),
                   "--listen-client-urls", self.url, "--advertise-client-urls", self.url,
                   "--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
                   "--initial-cluster", f"default={peer}"]
        with open(self.log_path, "ab") as log:
            self.process = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=log, stderr=log)
        deadline = time.monotonic() + 30
        while not self.answers():
            if self.process.poll() is not None:
                raise AssertionError(f"etcd exited with {self.process.returncode}:\n{self.log_tail()}")
            if time.monotonic() > deadline:
                raise AssertionError(f"etcd did not answer within 30 s:\n{self.log_tail()}")
            time.sleep(0.1)

    def answers(self) -> bool:
        import requests
        try:
            return requests.post(f"{self.url}/v3/kv/range", json={"key": "Lw=="}, timeout=1).status_code == 200
        except requests.RequestException:
            return False

    def kill(self):
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait(timeout=20)

    def log_tail(self) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-30:])
        except OSError:
            return "(no log)"


def cluster_cli(etcd: Etcd, cluster: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(binary_path()), "cluster", *args, "--etcd", etcd.url, "--cluster", cluster],
                          capture_output=True, text=True, timeout=60)


def status(etcd: Etcd, cluster: str) -> dict:
    done = cluster_cli(etcd, cluster, "status", "--json")
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def states(view: dict) -> dict:
    return {m["node_id"]: m["up"] for m in view["members"]}


def wait_for(etcd: Etcd, cluster: str, predicate, deadline_s: float, what: str) -> dict:
    deadline = time.monotonic() + deadline_s
    while True:
        view = status(etcd, cluster)
        if predicate(view):
            return view
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} not seen within {deadline_s} s; last status: {view}")
        time.sleep(0.2)


class Nodes:
    """Makes node processes of clusters under one etcd, and kills every one of them at teardown."""

    def __init__(self, tmp_path: Path, etcd: Etcd):
        self.tmp_path = tmp_path
        self.etcd = etcd
        self.made: list[FjordServer] = []

    def node(self, cluster: str, node_id: str, work_dir: str | None = None,
             extra_args=()) -> FjordServer:
        server = FjordServer(self.tmp_path / (work_dir or f"{cluster}-{node_id}"), cores=1, name=node_id,
                             extra_args=["--etcd", self.etcd.url, "--cluster", cluster, "--node-id", node_id,
                                         "--lease-ttl-s", str(LEASE_TTL_S), *extra_args])
        self.made.append(server)
        return server

    def start(self, cluster: str, count: int, extra_args=()) -> list[FjordServer]:
        servers = [self.node(cluster, f"n{i}", extra_args=extra_args) for i in range(1, count + 1)]
        for server in servers:
            server.start()
        wait_for(self.etcd, cluster, lambda v: v["up"] == count, UP_DEADLINE_S, f"{count} nodes up")
        return servers

    def kill_all(self):
        for server in self.made:
            server.kill()



def log_has(server: FjordServer, text: str) -> bool:
    return text in server.log_path.read_text(errors="replace")


def log_count(server: FjordServer, text: str) -> int:
    return server.log_path.read_text(errors="replace").count(text)


def wait_log(server: FjordServer, text: str, deadline_s: float = 20, seen: int = 0):
    """Until the log has `text` more than `seen` times: pass log_count() taken before an action to wait
    for a line the action causes, not one like it from before (a map line such as "4 members, 3 up" is
    also logged while nodes join, between a member's record and its alive key)."""
    deadline = time.monotonic() + deadline_s
    while log_count(server, text) <= seen:
        if time.monotonic() > deadline:
            raise AssertionError(f"'{text}' not in the log of {server.name} (after {seen} seen):\n"
                                 f"{server.log_tail()}")
        time.sleep(0.1)




def init_topology(etcd: Etcd, cluster: str, nodes: list[str], *extra: str) -> subprocess.CompletedProcess:
    done = cluster_cli(etcd, cluster, "init", "--nodes", ",".join(nodes), *extra)
    assert done.returncode == 0, done.stdout + done.stderr
    return done


def wait_serving(servers: list[FjordServer], deadline_s: float = 20):
    """Every node has read the topology from etcd and serves the cluster's data."""
    for server in servers:
        wait_log(server, "serving data", deadline_s)
