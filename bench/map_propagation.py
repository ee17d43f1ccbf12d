"""The cluster map at size, with real processes (docs/cluster.md, "Scale"): N `fjord serve` nodes (96 by
default; one core each, small I/O buffers) join one etcd on this machine, and each watches the map.

Measured, in one run:
  - a node's leaving (SIGTERM revokes its lease) and a new node's joining, as every other node sees
    them: the delay from the signal, or from the new node's start, to each node's log line with the new
    member and up counts (the log's millisecond timestamps, on this machine's clock);
  - a quiet minute: the CPU etcd and all the nodes spent, and the whole reads of the map and the
    watch's events applied per node (their /metrics counters).

Usage: .venv/bin/python bench/map_propagation.py [--nodes 96] [--quiet-s 60] [--no-watch]
Run it alone: the machine has two cores, and N processes share them.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import signal
import statistics
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests" / "integration"))

from cluster_support import Etcd, status  # noqa: E402
from conftest import FjordServer, fetch_metrics, metric_value  # noqa: E402

CLUSTER = "scale"
NODE_ARGS = ["--buffers", "8", "--io-size-kib", "512", "--no-huge-pages", "--kv-dram-mib", "8"]
LOG_TIME = re.compile(r"^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3})Z")


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def logged_at(server: FjordServer, text: str, after: float) -> float | None:
    """The wall time of the first line of the server's log holding `text` and logged after `after`."""
    for line in server.log_path.read_text(errors="replace").splitlines():
        if text not in line:
            continue
        match = LOG_TIME.match(line)
        if not match:
            continue
        at = datetime.fromisoformat(match.group(1)).replace(tzinfo=timezone.utc).timestamp()
        if at >= after - 0.001:
            return at
    return None


def delays(servers: list[FjordServer], text: str, since: float, deadline_s: float = 60) -> list[float]:
    """Each server's delay from `since` to its log line holding `text`; waits for all of them."""
    out: dict[str, float] = {}
    deadline = time.monotonic() + deadline_s
    while len(out) < len(servers):
        for server in servers:
            if server.name not in out and (at := logged_at(server, text, since)) is not None:
                out[server.name] = at - since
        if time.monotonic() > deadline:
            missing = [s.name for s in servers if s.name not in out]
            raise SystemExit(f"'{text}' not logged within {deadline_s} s by {missing}")
        time.sleep(0.2)
    return sorted(out.values())


def describe(name: str, values: list[float]) -> str:
    return (f"{name}: {len(values)} nodes, median {statistics.median(values) * 1000:.0f} ms, "
            f"p95 {values[int(len(values) * 0.95) - 1] * 1000:.0f} ms, max {values[-1] * 1000:.0f} ms")


def start_nodes(etcd: Etcd, work: Path, count: int) -> list[FjordServer]:
    servers = []
    for i in range(1, count + 1):
        server = FjordServer(work / f"n{i}", cores=1, name=f"n{i}",
                             extra_args=["--etcd", etcd.url, "--cluster", CLUSTER, "--node-id", f"n{i}",
                                         *NODE_ARGS])
        server.start()
        servers.append(server)
    deadline = time.monotonic() + 120
    while status(etcd, CLUSTER)["up"] < count:
        if time.monotonic() > deadline:
            raise SystemExit(f"{count} nodes not up within 120 s")
        time.sleep(0.5)
    return servers


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=96)
    parser.add_argument("--quiet-s", type=float, default=60)
    parser.add_argument("--no-watch", action="store_true",
                        help="nodes read the whole map every TTL/3 instead (--no-etcd-watch)")
    args = parser.parse_args()
    if args.no_watch:
        NODE_ARGS.append("--no-etcd-watch")
    n = args.nodes
    work = Path(tempfile.mkdtemp(prefix="fjord-map-"))
    etcd = Etcd(work)
    servers: list[FjordServer] = []
    try:
        etcd.start()
        started = time.monotonic()
        servers = start_nodes(etcd, work, n)
        print(f"{n} nodes up after {time.monotonic() - started:.1f} s; "
              f"node RSS {Path(f'/proc/{servers[0].process.pid}/status').read_text().split('VmRSS:')[1].split()[0]} kB")
        time.sleep(5)  # the joins' last changes settle

        before = {s.name: metric_value(fetch_metrics(s).text, "fjord_cluster_map_reads_total") for s in servers}
        events_before = {s.name: metric_value(fetch_metrics(s).text, "fjord_cluster_map_events_total")
                         for s in servers}
        etcd_cpu, nodes_cpu = cpu_seconds(etcd.process.pid), sum(cpu_seconds(s.process.pid) for s in servers)
        quiet_began = time.monotonic()
        time.sleep(args.quiet_s)
        quiet = time.monotonic() - quiet_began
        etcd_cpu = cpu_seconds(etcd.process.pid) - etcd_cpu
        nodes_cpu = sum(cpu_seconds(s.process.pid) for s in servers) - nodes_cpu
        reads = [metric_value(fetch_metrics(s).text, "fjord_cluster_map_reads_total") - before[s.name]
                 for s in servers]
        events = [metric_value(fetch_metrics(s).text, "fjord_cluster_map_events_total") - events_before[s.name]
                  for s in servers]
        print(f"quiet {quiet:.0f} s: etcd CPU {etcd_cpu / quiet * 100:.1f}% of a core, all nodes together "
              f"{nodes_cpu / quiet * 100:.1f}%; per node {statistics.mean(reads):.1f} whole reads "
              f"and {statistics.mean(events):.1f} events applied")

        leaving = servers[-1]
        since = time.time()
        leaving.process.send_signal(signal.SIGTERM)
        print(describe("a node's leaving seen", delays(servers[:-1], f"{n} members, {n - 1} up", since)))
        leaving.process.wait(timeout=30)

        joining = FjordServer(work / f"n{n + 1}", cores=1, name=f"n{n + 1}",
                              extra_args=["--etcd", etcd.url, "--cluster", CLUSTER, "--node-id", f"n{n + 1}",
                                          *NODE_ARGS])
        since = time.time()
        joining.start()
        servers.append(joining)
        print(describe("a new node's joining seen", delays(servers[:-2], f"{n + 1} members, {n} up", since)))
        whole = [metric_value(fetch_metrics(s).text, "fjord_cluster_map_reads_total") - before[s.name]
                 for s in servers[:-2]]
        print(f"whole reads of the map per node over the run: median {statistics.median(whole):.0f}, "
              f"max {max(whole):.0f}")
        return 0
    finally:
        for server in servers:
            server.kill()
        etcd.kill()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
