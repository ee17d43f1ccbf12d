"""Cluster membership on a real etcd (docs/cluster.md): four `fjord serve` node processes join one
cluster, and the map follows them through kill -9, SIGTERM, restarts, an etcd outage and decommission.

The data the nodes share is tested in test_cluster_data.py; here only what membership does.
"""

from __future__ import annotations

import base64
import subprocess
import time

import pytest
import requests
from botocore.exceptions import ClientError

from cluster_support import (DOWN_DEADLINE_S, LEASE_TTL_S, UP_DEADLINE_S, Etcd, Nodes, cluster_cli,
                             init_topology, log_count, log_has, states, status, wait_for, wait_log,
                             wait_serving)
from conftest import binary_path, fetch_metrics, free_port, metric_value


@pytest.fixture
def etcd(tmp_path):
    server = Etcd(tmp_path)
    server.start()
    yield server
    server.kill()


@pytest.fixture
def nodes(tmp_path, etcd):
    made = Nodes(tmp_path, etcd)
    yield made
    made.kill_all()


def test_four_nodes_join_and_each_change_raises_the_epoch(etcd, nodes):
    servers = nodes.start("c4", 4)
    view = status(etcd, "c4")
    assert view["epoch"] == 4, view  # one map change per node that joined
    assert states(view) == {"n1": True, "n2": True, "n3": True, "n4": True}
    by_id = {m["node_id"]: m for m in view["members"]}
    for server in servers:
        assert by_id[server.name]["s3_endpoint"] == server.endpoint
        assert by_id[server.name]["cores"] == 1
    # Every node learns the map from etcd, not only the one that changed it.
    for server in servers:
        wait_log(server, "map epoch 4, 4 members, 4 up")
    text = cluster_cli(etcd, "c4", "status")
    assert text.returncode == 0 and "map epoch 4, 4 members, 4 up" in text.stdout, text
    # A restart on the same endpoint is not a map change.
    servers[0].restart()
    wait_for(etcd, "c4", lambda v: v["up"] == 4, UP_DEADLINE_S, "n1 back up")
    assert status(etcd, "c4")["epoch"] == 4


def test_a_killed_node_goes_down_after_its_lease_and_comes_back(etcd, nodes):
    servers = nodes.start("ck", 4)
    seen = {s.name: log_count(s, "4 members, 3 up") for s in servers}  # logged while n4 joined, too
    servers[1].kill()
    killed_at = time.monotonic()
    view = wait_for(etcd, "ck", lambda v: not states(v)["n2"], DOWN_DEADLINE_S, "n2 down")
    assert time.monotonic() - killed_at >= LEASE_TTL_S - 0.5  # it was the lease, not something else
    assert states(view) == {"n1": True, "n2": False, "n3": True, "n4": True}
    assert view["epoch"] == 4, "a node going down is not a membership change"
    for server in (servers[0], servers[2], servers[3]):
        wait_log(server, "4 members, 3 up", seen=seen[server.name])
    servers[1].start()
    view = wait_for(etcd, "ck", lambda v: v["up"] == 4, UP_DEADLINE_S, "n2 up again")
    assert view["epoch"] == 4


def test_a_restart_right_after_kill_waits_for_the_old_lease(etcd, nodes):
    """The node id is held by the dead process's lease until it expires: the new process serves S3 at
    once but takes the id only after that, so two live processes never hold one id."""
    servers = nodes.start("cr", 2)
    servers[0].kill()
    servers[0].start()  # ready: S3 is served while the membership waits
    wait_log(servers[0], "node id n1 is held by a live process")
    assert states(status(etcd, "cr"))["n1"] is True  # still the old lease
    wait_for(etcd, "cr", lambda v: v["up"] == 2 and "node n1 is up" in
             servers[0].log_path.read_text().split("start #2")[-1], DOWN_DEADLINE_S + UP_DEADLINE_S,
             "the new process holding n1")


def test_sigterm_leaves_at_once(etcd, nodes):
    servers = nodes.start("ct", 2)
    assert servers[0].stop() == 0
    # Revoked on the way out: down at the next look, not after the TTL.
    assert states(status(etcd, "ct")) == {"n1": False, "n2": True}
    assert log_has(servers[0], "node n1 left (lease revoked)")


def test_losing_etcd_stops_membership_not_the_data_path(etcd, nodes):
    init_topology(etcd, "ce", ["n1", "n2"], "--data-shards", "1", "--parity-shards", "1")
    servers = nodes.start("ce", 2)
    wait_serving(servers)
    for server in servers:  # each node's map has both: the data path works from it without etcd
        wait_log(server, "2 members, 2 up")
    s3 = servers[0].client()
    s3.create_bucket(Bucket="during-outage")
    etcd.kill()
    for server in servers:
        wait_log(server, "etcd unreachable", deadline_s=LEASE_TTL_S + 10)
    # Well past the lease TTL: the data path still answers.
    time.sleep(LEASE_TTL_S + 1)
    body = b"x" * 300_000
    s3.put_object(Bucket="during-outage", Key="k", Body=body)
    assert s3.get_object(Bucket="during-outage", Key="k")["Body"].read() == body
    # A bucket the node does not know may exist (made through a node it has not heard from): without
    # etcd to ask, it says so with a 503 to retry, never NoSuchBucket
    with pytest.raises(ClientError) as unknown:
        s3.head_object(Bucket="unknown-during-outage", Key="k")
    assert unknown.value.response["ResponseMetadata"]["HTTPStatusCode"] == 503
    # A node stops in time without etcd (its revoke fails under the call deadline), and one that
    # starts without etcd serves and joins once etcd is back.
    assert servers[1].stop() == 0
    assert log_has(servers[1], "could not revoke the lease on stop")
    servers[1].start()
    servers[1].client().list_buckets()
    etcd.start()  # same data directory: the members are still there
    for server in servers:
        wait_log(server, "etcd answers again", deadline_s=30)
    wait_for(etcd, "ce", lambda v: v["up"] == 2, UP_DEADLINE_S, "both nodes up after the outage")
    assert s3.get_object(Bucket="during-outage", Key="k")["Body"].read() == body


def etcd_kv(etcd: Etcd, verb: str, key: str, value: bytes | None = None):
    """A put or deleterange through etcd's JSON gateway, as an operator's etcdctl would."""
    body = {"key": base64.b64encode(key.encode()).decode()}
    if value is not None:
        body["value"] = base64.b64encode(value).decode()
    requests.post(f"{etcd.url}/v3/kv/{verb}", json=body, timeout=5).raise_for_status()


def test_a_map_that_cannot_be_read_makes_the_node_not_ready_and_says_so(etcd, nodes):
    """etcd answers, but the map it holds cannot be read (here a member record that does not decode):
    the node serves on from the map it has, logs it once, answers /health/ready with 503 and the
    reason, and counts it in /metrics; once the map reads again it is ready again. An etcd that does
    not answer at all leaves it ready (it serves on by design)."""
    servers = nodes.start("cm", 2)
    node = servers[0]
    assert requests.get(f"{node.endpoint}/health/ready", timeout=5).status_code == 200
    broken = "/fjord/cm/members/zz"
    etcd_kv(etcd, "put", broken, b"not a member record")
    wait_log(node, "cannot read the cluster map from etcd")
    deadline = time.monotonic() + 10
    while (ready := requests.get(f"{node.endpoint}/health/ready", timeout=5)).status_code != 503:
        assert time.monotonic() < deadline, ready.text
        time.sleep(0.1)
    assert "the cluster map cannot be read from etcd" in ready.text, ready.text
    text = fetch_metrics(node).text
    assert "fjord_cluster_map_unreadable 1" in text, text
    failures = [line for line in text.splitlines()
                if line.startswith("fjord_cluster_map_read_failures_total ")]
    assert failures and int(failures[0].split()[1]) >= 1, text
    node.client().list_buckets()  # the data path goes on
    etcd_kv(etcd, "deleterange", broken)
    wait_log(node, "the cluster map reads again")
    deadline = time.monotonic() + 10
    while requests.get(f"{node.endpoint}/health/ready", timeout=5).status_code != 200:
        assert time.monotonic() < deadline
        time.sleep(0.1)
    assert "fjord_cluster_map_unreadable 0" in fetch_metrics(node).text
    etcd.kill()
    wait_log(node, "etcd unreachable", deadline_s=LEASE_TTL_S + 10)
    time.sleep(1)  # a map read or two fail meanwhile: etcd down is not "unreadable"
    assert requests.get(f"{node.endpoint}/health/ready", timeout=5).status_code == 200


def test_remove_node_decommissions_only_a_node_that_is_down(etcd, nodes):
    servers = nodes.start("cd", 3)
    refused = cluster_cli(etcd, "cd", "remove-node", "n3")
    assert refused.returncode == 1 and "n3 is up: stop it first" in refused.stderr, refused
    assert status(etcd, "cd")["epoch"] == 3

    assert servers[2].stop() == 0
    removed = cluster_cli(etcd, "cd", "remove-node", "n3")
    assert removed.returncode == 0 and "map epoch 4" in removed.stdout, removed
    view = status(etcd, "cd")
    assert view["epoch"] == 4 and states(view) == {"n1": True, "n2": True}
    for server in servers[:2]:
        wait_log(server, "map epoch 4, 2 members, 2 up")

    unknown = cluster_cli(etcd, "cd", "remove-node", "n9")
    assert unknown.returncode == 1 and "n9 is not a member" in unknown.stderr, unknown
    # A removed node that starts again joins again: a new map change.
    servers[2].start()
    view = wait_for(etcd, "cd", lambda v: v["up"] == 3, UP_DEADLINE_S, "n3 joined again")
    assert view["epoch"] == 5


def test_a_second_process_with_a_live_node_id_never_takes_it(etcd, nodes):
    first = nodes.node("cu", "n1")
    second = nodes.node("cu", "n1", work_dir="cu-n1-second")  # its own data, the same node id
    first.start()
    wait_for(etcd, "cu", lambda v: v["up"] == 1, UP_DEADLINE_S, "n1 up")
    second.start()
    wait_log(second, "node id n1 is held by a live process")
    time.sleep(LEASE_TTL_S * 2)  # several lease periods: the first one keeps it
    assert not log_has(second, "node n1 is up")
    members = status(etcd, "cu")["members"]
    assert len(members) == 1 and members[0]["up"]
    # Once the first leaves, the second takes the id.
    first.stop()
    wait_log(second, "node n1 is up", deadline_s=UP_DEADLINE_S)


def test_clusters_under_one_etcd_are_separate(etcd, nodes):
    a = nodes.node("alpha", "n1")
    b = nodes.node("beta", "n1")
    a.start()
    b.start()
    wait_for(etcd, "alpha", lambda v: v["up"] == 1, UP_DEADLINE_S, "alpha's n1 up")
    wait_for(etcd, "beta", lambda v: v["up"] == 1, UP_DEADLINE_S, "beta's n1 up")
    assert status(etcd, "alpha")["epoch"] == 1 and status(etcd, "beta")["epoch"] == 1
    assert status(etcd, "gamma") == {"cluster": "gamma", "epoch": 0, "members": [], "up": 0}


@pytest.mark.parametrize("args, message", [
    (["--node-id", "n1"], "--node-id and --advertise need --etcd"),
    (["--etcd", "http://127.0.0.1:1"], "--etcd needs --node-id"),
    (["--etcd", "http://127.0.0.1:1", "--node-id", "Bad_Name"], "node id 'Bad_Name'"),
    (["--etcd", "http://127.0.0.1:1", "--node-id", "n1", "--cluster", "a/b"], "cluster name 'a/b'"),
    (["--etcd", "https://127.0.0.1:1", "--node-id", "n1"], "http://"),
    (["--etcd", "http://127.0.0.1:1", "--node-id", "n1", "--lease-ttl-s", "1"], "--lease-ttl-s"),
    (["--etcd", "http://127.0.0.1:1", "--node-id", "n1", "--listen", "0.0.0.0:0"], "--advertise"),
])
def test_cluster_options_are_checked(tmp_path, args, message):
    data = tmp_path / "data"
    data.mkdir()
    done = subprocess.run([str(binary_path()), "serve", "--data", str(data), *args],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 2, done
    assert message in done.stderr, done.stderr


def test_cluster_cli_without_etcd_fails_clearly(tmp_path):
    port = free_port()  # nothing listens there
    done = subprocess.run([str(binary_path()), "cluster", "status", "--etcd", f"http://127.0.0.1:{port}"],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 1 and done.stderr.startswith("fjord cluster: "), done
    usage = subprocess.run([str(binary_path()), "cluster", "frobnicate"], capture_output=True, text=True,
                           timeout=60)
    assert usage.returncode == 2 and "usage: fjord cluster status" in usage.stderr, usage


def test_a_cluster_map_larger_than_one_etcd_answer_is_read_in_pages(etcd, nodes):
    """The map is read in pages of one revision: a cluster whose records together pass the 4 MiB an etcd
    answer may have (large lifecycle rules and policies on many buckets) still sees its buckets and
    members; it read the map in one range, failed every refresh for good and said nothing."""
    import base64
    import requests

    init_topology(etcd, "big", ["n1", "n2", "n3", "n4"])
    servers = nodes.start("big", 4)
    wait_serving(servers)
    # Records the nodes do not read, 6 MiB in all: what makes the range large is only its size
    for i in range(6):
        key = base64.b64encode(f"/fjord/big/filler/{i}".encode()).decode()
        value = base64.b64encode(bytes([65 + i]) * (1 << 20)).decode()
        assert requests.post(f"{etcd.url}/v3/kv/put", json={"key": key, "value": value},
                             timeout=10).status_code == 200
    servers[0].client().create_bucket(Bucket="after-the-filler")
    # ListBuckets answers from each node's own view of the map: it must come from a refresh
    deadline = time.monotonic() + 15
    for server in servers[1:]:
        while "after-the-filler" not in [b["Name"] for b in server.client().list_buckets()["Buckets"]]:
            assert time.monotonic() < deadline, f"{server.name} never read the map again"
            time.sleep(0.2)
    assert [s.name for s in servers if log_has(s, "cannot read the cluster map")] == []
    # cluster status reads the same map; every node is up in it (a node whose first read of the large
    # map outlasted the tests' 2 s lease may be seen down for a moment, and is up again at once)
    wait_for(etcd, "big", lambda v: states(v) == {f"n{i}": True for i in range(1, 5)},
             UP_DEADLINE_S, "every node up with the large map")


def test_the_heal_leftover_age_is_the_clusters(etcd, nodes):
    """Healing and the writers' deadlines assume one leftover age across the cluster: it is in the
    topology (fjord cluster init --heal-leftover-age-s), and a node's own option does not change it."""
    bad = cluster_cli(etcd, "aged", "init", "--nodes", "n1,n2,n3,n4", "--heal-leftover-age-s", "0")
    assert bad.returncode != 0 and "--heal-leftover-age-s" in bad.stderr
    init_topology(etcd, "aged", ["n1", "n2", "n3", "n4"], "--heal-leftover-age-s", "7")
    node = nodes.node("aged", "n1", extra_args=["--heal-leftover-age-s", "3600"])
    node.start()
    wait_log(node, "heal leftover age 7 s, the cluster's")
    shown = cluster_cli(etcd, "aged", "topology")
    assert shown.returncode == 0 and "7" in shown.stdout, shown.stdout + shown.stderr


def expire_tmp(s3, bucket: str):
    s3.create_bucket(Bucket=bucket)
    s3.put_bucket_lifecycle_configuration(Bucket=bucket, LifecycleConfiguration={"Rules": [
        {"ID": "tmp", "Status": "Enabled", "Filter": {"Prefix": "tmp/"}, "Expiration": {"Days": 1}}]})


def tmp_keys(s3, bucket: str) -> list[str]:
    return [o["Key"] for o in s3.list_objects_v2(Bucket=bucket, Prefix="tmp/").get("Contents", [])]


def wait_expired(s3, bucket: str, what: str, deadline_s: float = 30):
    deadline = time.monotonic() + deadline_s
    while tmp_keys(s3, bucket):
        assert time.monotonic() < deadline, f"tmp/ never expired: {what}"
        time.sleep(0.3)


def lifecycle_runner_gauge(server) -> int:
    return metric_value(fetch_metrics(server).text, "fjord_cluster_lifecycle_runner")


def test_exactly_one_node_applies_the_lifecycle_rules(etcd, nodes):
    """Every node runs the lifecycle task, but only the one holding lifecycle-runner in etcd (bound to its
    lease) acts. A killed runner's key goes with its lease and another node takes it; a runner cut off
    from etcd stops before its lease could expire, so while etcd is away no node acts."""
    init_topology(etcd, "lc", ["n1", "n2", "n3", "n4"])
    servers = nodes.start("lc", 4, extra_args=["--lifecycle-interval-seconds", "1",
                                               "--lifecycle-day-seconds", "1"])
    wait_serving(servers)
    for server in servers:  # each node's map has all four: every write reaches every node
        wait_log(server, "4 members, 4 up")
    runner = wait_for(etcd, "lc", lambda v: v.get("lifecycle_runner"), UP_DEADLINE_S,
                      "a lifecycle runner")["lifecycle_runner"]
    by_name = {s.name: s for s in servers}
    others = [s for s in servers if s.name != runner]
    s3 = others[0].client()  # written through a node that is not the runner
    expire_tmp(s3, "aging")
    for i in range(30):
        s3.put_object(Bucket="aging", Key=f"tmp/{i}", Body=b"x" * 1000)
    s3.put_object(Bucket="aging", Key="kept", Body=b"y")
    wait_expired(s3, "aging", "with four nodes up")
    assert [s.name for s in servers if log_has(s, "objects expired")] == [runner]
    assert [s.name for s in servers if log_has(s, "applies the lifecycle rules")] == [runner]
    assert {s.name: lifecycle_runner_gauge(s) for s in servers} == \
        {s.name: int(s.name == runner) for s in servers}
    assert "lifecycle rules applied by: " + runner in cluster_cli(etcd, "lc", "status").stdout

    by_name[runner].kill()
    after = wait_for(etcd, "lc", lambda v: v.get("lifecycle_runner") not in ("", runner),
                     DOWN_DEADLINE_S, "another lifecycle runner")["lifecycle_runner"]
    s3 = by_name[after].client()
    for i in range(10):
        s3.put_object(Bucket="aging", Key=f"tmp/again-{i}", Body=b"x")
    wait_expired(s3, "aging", f"after {runner} was killed")
    assert log_has(by_name[after], "objects expired")

    # etcd away: the runner cannot know it still holds the key, so within its lease it stops
    etcd.kill()
    wait_log(by_name[after], "etcd unreachable", deadline_s=LEASE_TTL_S + 10)
    time.sleep(LEASE_TTL_S)
    assert lifecycle_runner_gauge(by_name[after]) == 0
    for i in range(5):
        s3.put_object(Bucket="aging", Key=f"tmp/outage-{i}", Body=b"x")
    time.sleep(3)  # three passes' worth: nothing is due to an absent runner
    assert len(tmp_keys(s3, "aging")) == 5
    etcd.start()
    wait_expired(s3, "aging", "once etcd was back")
    assert s3.get_object(Bucket="aging", Key="kept")["Body"].read() == b"y"


def test_map_changes_reach_every_node_through_the_watch(etcd, nodes):
    """While its watch of etcd answers, a node reads the whole map only every 30 s: changes reach it as
    the watch sees them. With a 30 s lease, reading the map every TTL/3 would take up to 10 s."""
    init_topology(etcd, "cw", ["n1", "n2", "n3", "n4"])
    servers = nodes.start("cw", 4, extra_args=["--lease-ttl-s", "30"])
    wait_serving(servers)
    for server in servers:
        wait_log(server, "4 members, 4 up")
    def map_counters(server):
        text = fetch_metrics(server).text
        return (metric_value(text, "fjord_cluster_map_reads_total"),
                metric_value(text, "fjord_cluster_map_events_total"))

    before = {s.name: map_counters(s) for s in servers}
    delays = []
    for i in range(5):
        made = time.monotonic()
        servers[i % 4].client().create_bucket(Bucket=f"watched-{i}")
        for server in servers:
            while f"watched-{i}" not in [b["Name"] for b in server.client().list_buckets()["Buckets"]]:
                assert time.monotonic() - made < 5, f"{server.name} did not see watched-{i} in 5 s"
                time.sleep(0.02)
        delays.append(time.monotonic() - made)
    print("bucket creation seen by every node after (s):", [round(d, 3) for d in delays])
    # Each node applied the watch's events to the map it holds: no whole read per change (at most
    # one, the 30 s safety net, can fall in the loop)
    for server in servers:
        reads, events = map_counters(server)
        print(f"{server.name}: {reads - before[server.name][0]:.0f} whole reads, "
              f"{events - before[server.name][1]:.0f} events applied")
        assert reads - before[server.name][0] <= 1, server.name
        assert events - before[server.name][1] >= 5, server.name
    # A node that leaves (SIGTERM revokes its lease) is seen down at once, not after a read of the map
    seen = {s.name: log_count(s, "4 members, 3 up") for s in servers}  # logged while n4 joined, too
    left = time.monotonic()
    assert servers[3].stop() == 0
    for server in servers[:3]:
        wait_log(server, "4 members, 3 up", deadline_s=5, seen=seen[server.name])
    print("a node's leaving seen after (s):", round(time.monotonic() - left, 3))
    assert [s.name for s in servers if log_has(s, "cannot watch")] == []
