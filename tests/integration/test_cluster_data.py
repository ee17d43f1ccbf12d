"""The erasure-coded cluster's data path on real processes (docs/cluster.md): four `fjord serve` nodes
on one etcd, a 2+2 topology, objects written through any node and read through any other, a node down
(writes and reads go on; healing brings every object back to full width when it returns), two nodes
down (reads go on), damaged shards (never served, rebuilt), and the data plane's own access control.
"""

from __future__ import annotations

import hashlib
import http.client
import os
import random
import shutil
import signal
import subprocess
import threading
import time

import pytest
import requests
from botocore.exceptions import ClientError

import s3util
from cluster_support import (Etcd, Nodes, cluster_cli, init_topology, log_count, log_has, status,
                             wait_for, wait_log, wait_serving)
from conftest import SEED

CLUSTER = "data"
NODE_ARGS = ["--heal-scan-interval-s", "3600"]
# The age at which healing decides a write left below W: the cluster's, in its topology
LEFTOVER_AGE = ("--heal-leftover-age-s", "2")


@pytest.fixture
def cluster(tmp_path):
    etcd = Etcd(tmp_path)
    etcd.start()
    made = Nodes(tmp_path, etcd)
    init_topology(etcd, CLUSTER, ["n1", "n2", "n3", "n4"], *LEFTOVER_AGE)
    servers = made.start(CLUSTER, 4, extra_args=NODE_ARGS)
    wait_serving(servers)
    # etcd's view has every node up; each node's own map must too, or a write through a node that
    # has not yet read the last one joining counts that node down (503 with two of 2+2 "down").
    for server in servers:
        wait_log(server, "4 members, 4 up")
    yield etcd, servers
    made.kill_all()
    etcd.kill()


def make_bucket(servers, name: str):
    servers[0].client().create_bucket(Bucket=name)
    # Bucket records travel through etcd: every node sees them within a membership refresh.
    deadline = time.monotonic() + 15
    for server in servers:
        while True:
            try:
                server.client().head_bucket(Bucket=name)
                break
            except ClientError:
                assert time.monotonic() < deadline, f"bucket {name} not seen by {server.name}"
                time.sleep(0.1)


def heal(etcd: Etcd) -> subprocess.CompletedProcess:
    return cluster_cli(etcd, CLUSTER, "heal", "--wait", "--timeout-s", "40")


def body_of(rng: random.Random, size: int) -> bytes:
    return rng.randbytes(size)


SIZES = [0, 1, 100, 4095, 4096, 65_537, 1 << 20, (2 << 20) + 5, 5_000_001]


def test_objects_written_through_one_node_read_through_every_other(cluster):
    _, servers = cluster
    make_bucket(servers, "shared")
    rng = random.Random(SEED)
    bodies = {}
    for i, size in enumerate(SIZES):
        key = f"dir{i % 2}/obj-{size}"
        bodies[key] = body_of(rng, size)
        put = servers[i % 4].client().put_object(Bucket="shared", Key=key, Body=bodies[key])
        assert put["ETag"]
    for key, body in bodies.items():
        for server in servers:
            s3 = server.client()
            got = s3.get_object(Bucket="shared", Key=key)
            assert got["Body"].read() == body, (key, server.name)
            assert got["ContentLength"] == len(body)
            assert s3.head_object(Bucket="shared", Key=key)["ETag"] == got["ETag"]
        if len(body) > 10:
            first, last = len(body) // 3, len(body) - 2
            ranged = servers[2].client().get_object(Bucket="shared", Key=key, Range=f"bytes={first}-{last}")
            assert ranged["Body"].read() == body[first:last + 1]
    # Listings from any node: whole, by prefix, grouped, and page by page.
    s3 = servers[3].client()
    listed = [o["Key"] for o in s3.list_objects_v2(Bucket="shared")["Contents"]]
    assert listed == sorted(bodies)
    grouped = s3.list_objects_v2(Bucket="shared", Delimiter="/")
    assert [p["Prefix"] for p in grouped["CommonPrefixes"]] == ["dir0/", "dir1/"]
    assert "Contents" not in grouped
    assert {o["Key"] for o in s3.list_objects_v2(Bucket="shared", Prefix="dir1/")["Contents"]} == \
        {k for k in bodies if k.startswith("dir1/")}
    paged, token = [], None
    while True:
        page = s3.list_objects_v2(Bucket="shared", MaxKeys=2, **({"ContinuationToken": token} if token else {}))
        paged += [o["Key"] for o in page.get("Contents", [])]
        if not page["IsTruncated"]:
            break
        token = page["NextContinuationToken"]
    assert paged == sorted(bodies)
    sizes = {o["Key"]: o["Size"] for o in s3.list_objects_v2(Bucket="shared")["Contents"]}
    assert sizes == {k: len(v) for k, v in bodies.items()}


def test_a_bucket_made_through_one_node_is_known_at_once_to_the_others(cluster):
    """A client that makes a bucket through one node and then writes through all of them (as load
    generators and multi-endpoint clients do) is never told NoSuchBucket: a node that does not know a
    bucket asks etcd before it answers so."""
    _, servers = cluster
    for round_ in range(3):
        name = f"at-once-{round_}"
        servers[round_ % 4].client().create_bucket(Bucket=name)
        for server in servers:
            s3 = server.client()
            s3.put_object(Bucket=name, Key=f"from-{server.name}", Body=server.name.encode())
            s3.head_bucket(Bucket=name)
        listed = servers[(round_ + 1) % 4].client().list_objects_v2(Bucket=name)["Contents"]
        assert sorted(o["Key"] for o in listed) == sorted(f"from-{s.name}" for s in servers)
    # A bucket that exists nowhere is still NoSuchBucket, through every node
    for server in servers:
        with pytest.raises(ClientError) as e:
            server.client().put_object(Bucket="made-nowhere", Key="k", Body=b"x")
        assert e.value.response["Error"]["Code"] == "NoSuchBucket"


def test_a_put_crossing_a_delete_bucket_is_not_acknowledged_into_a_deleted_bucket(cluster):
    """A PUT through node 1 whose body is still arriving when DeleteBucket through node 2 finds the
    bucket empty, and PUTs through the other nodes right after: the deletion fences the bucket's
    shard buckets on every node first, so no shard of either kind commits and no PUT answers 200 for
    an object whose bucket is gone (an acknowledged write lost)."""
    _, servers = cluster
    writer, deleter = servers[0], servers[1]
    make_bucket(servers, "doomed")
    path, body = "/doomed/late", b"x" * (256 * 1024)
    signed_head = s3util.sign_headers(writer.credentials, "PUT", writer.host, path).headers
    connection = http.client.HTTPConnection(writer.host, timeout=30)
    try:
        connection.putrequest("PUT", path, skip_host=True, skip_accept_encoding=True)
        for name, value in signed_head.items():
            connection.putheader(name, value)
        connection.putheader("content-length", str(len(body)))
        connection.endheaders()
        connection.send(body[:-1])  # every byte but the last: no shard can commit yet
        time.sleep(0.5)
        deleter.client().delete_bucket(Bucket="doomed")
        # At once, PUTs through the other nodes, whose maps may still hold the bucket (they learn
        # the deletion at their next read of etcd): before the fences these were acknowledged, their
        # shard buckets made again on every node and never reclaimed.
        stale = [signed(server, server.credentials, "PUT", f"/doomed/after-{server.name}", b"y")
                 for server in servers if server is not deleter]
        connection.send(body[-1:])
        answer = connection.getresponse()
        status_code, text = answer.status, answer.read()
    finally:
        connection.close()
    assert status_code != 200, "the PUT was acknowledged into a bucket deleted before it committed"
    assert status_code in (404, 503), text
    for put in stale:
        assert put.status_code in (404, 503), f"a PUT after the deletion answered {put.status_code}"
    # A deletion refused for objects lifts its fences: writes go on.
    make_bucket(servers, "kept")
    servers[2].client().put_object(Bucket="kept", Key="a", Body=b"a")
    with pytest.raises(ClientError) as refused:
        deleter.client().delete_bucket(Bucket="kept")
    assert refused.value.response["Error"]["Code"] == "BucketNotEmpty"
    for server in servers:
        server.client().put_object(Bucket="kept", Key=f"b-{server.name}", Body=b"b")
    deadline = time.monotonic() + 15  # the deletion reaches every node's map
    for server in servers:
        while True:
            try:
                server.client().head_bucket(Bucket="doomed")
            except ClientError as e:
                assert e.response["Error"]["Code"] in ("404", "NoSuchBucket")
                break
            assert time.monotonic() < deadline, f"{server.name} still has the deleted bucket"
            time.sleep(0.1)


def test_small_objects_read_without_waiting_on_a_timer(cluster):
    """Shards of a small object are answered whole in one receive; a reader that did not count a read
    finished that way waited for the 2 s hedge on every GET of a 4 KiB object. On a healthy cluster no
    read hedges, through any node."""
    _, servers = cluster
    make_bucket(servers, "small")
    rng = random.Random(SEED)
    bodies = {f"s-{size}-{i}": body_of(rng, size) for size in (1000, 2048, 4096, 5000, 9000)
              for i in range(3)}
    for i, (key, body) in enumerate(bodies.items()):
        servers[i % 4].client().put_object(Bucket="small", Key=key, Body=body)
    slowest = 0.0
    for server in servers:
        s3 = server.client()
        for key, body in bodies.items():
            began = time.monotonic()
            assert s3.get_object(Bucket="small", Key=key)["Body"].read() == body
            slowest = max(slowest, time.monotonic() - began)
    hedged = [s.name for s in servers if log_has(s, "slower than the")]
    assert hedged == [], f"reads hedged on a healthy cluster (slowest GET {slowest:.3f} s)"


def test_overwrite_delete_copy_and_conditions(cluster):
    _, servers = cluster
    make_bucket(servers, "edits")
    a, b = servers[0].client(), servers[1].client()
    a.put_object(Bucket="edits", Key="k", Body=b"first")
    b.put_object(Bucket="edits", Key="k", Body=b"second version")
    assert servers[2].client().get_object(Bucket="edits", Key="k")["Body"].read() == b"second version"
    # If-None-Match: * refuses an existing key, through any node.
    with pytest.raises(ClientError) as refused:
        servers[3].client().put_object(Bucket="edits", Key="k", Body=b"x", IfNoneMatch="*")
    assert refused.value.response["Error"]["Code"] == "PreconditionFailed"
    etag = a.head_object(Bucket="edits", Key="k")["ETag"]
    with pytest.raises(ClientError) as stale:
        b.put_object(Bucket="edits", Key="k", Body=b"x", IfMatch='"not-the-etag"')
    assert stale.value.response["Error"]["Code"] == "PreconditionFailed"
    b.put_object(Bucket="edits", Key="k", Body=b"third", IfMatch=etag)
    # A cluster cannot change an object's ACL in place, so its buckets keep ACLs disabled: an owner-only
    # ACL (s3cmd sends one back after a copy) is accepted and changes nothing.
    rules = a.get_bucket_ownership_controls(Bucket="edits")["OwnershipControls"]["Rules"]
    assert rules == [{"ObjectOwnership": "BucketOwnerEnforced"}]
    a.put_object_acl(Bucket="edits", Key="k", ACL="private")
    assert a.get_object(Bucket="edits", Key="k")["Body"].read() == b"third"
    # Copies read the source's shards and write the target's.
    big = os.urandom(3 * (1 << 20) + 17)
    a.put_object(Bucket="edits", Key="big", Body=big)
    b.copy_object(Bucket="edits", Key="big-copy", CopySource={"Bucket": "edits", "Key": "big"})
    assert servers[3].client().get_object(Bucket="edits", Key="big-copy")["Body"].read() == big
    # Deletes leave tombstones: the key reads as absent everywhere and drops out of listings.
    servers[2].client().delete_object(Bucket="edits", Key="k")
    for server in servers:
        with pytest.raises(ClientError) as gone:
            server.client().get_object(Bucket="edits", Key="k")
        assert gone.value.response["Error"]["Code"] == "NoSuchKey"
    assert [o["Key"] for o in a.list_objects_v2(Bucket="edits")["Contents"]] == ["big", "big-copy"]
    servers[0].client().put_object(Bucket="edits", Key="k", Body=b"back", IfNoneMatch="*")
    # A bucket is deleted only when empty; once deleted it is gone on every node.
    with pytest.raises(ClientError) as full:
        a.delete_bucket(Bucket="edits")
    assert full.value.response["Error"]["Code"] == "BucketNotEmpty"
    for key in ("k", "big", "big-copy"):
        a.delete_object(Bucket="edits", Key=key)
    a.delete_bucket(Bucket="edits")
    with pytest.raises(ClientError) as missing:
        a.head_bucket(Bucket="edits")
    assert missing.value.response["Error"]["Code"] in ("404", "NoSuchBucket")


def test_concurrent_conditional_creates_through_different_nodes_one_wins(cluster):
    _, servers = cluster
    make_bucket(servers, "race")
    for round_ in range(5):
        outcomes = []
        lock = threading.Lock()

        def create(i):
            s3 = servers[i % 4].client()
            try:
                s3.put_object(Bucket="race", Key=f"once-{round_}", Body=f"writer {i}".encode(), IfNoneMatch="*")
                result = "won"
            except ClientError as e:
                result = e.response["Error"]["Code"]
            with lock:
                outcomes.append(result)

        threads = [threading.Thread(target=create, args=(i,)) for i in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert outcomes.count("won") <= 1, outcomes
        assert set(outcomes) <= {"won", "PreconditionFailed", "ConditionalRequestConflict", "SlowDown",
                                 "ServiceUnavailable"}, outcomes
        body = servers[0].client().get_object(Bucket="race", Key=f"once-{round_}")["Body"].read()
        if "won" in outcomes:
            assert body.startswith(b"writer ")


def test_a_node_down_writes_and_reads_go_on_and_healing_restores_full_width(cluster):
    etcd, servers = cluster
    make_bucket(servers, "degraded")
    rng = random.Random(SEED + 1)
    before = {f"before/{i}": body_of(rng, rng.choice(SIZES[1:])) for i in range(6)}
    for key, body in before.items():
        servers[0].client().put_object(Bucket="degraded", Key=key, Body=body)
    servers[3].kill()
    during = {f"during/{i}": body_of(rng, rng.choice(SIZES)) for i in range(12)}
    for i, (key, body) in enumerate(during.items()):
        servers[i % 3].client().put_object(Bucket="degraded", Key=key, Body=body)
    everything = {**before, **during}
    for key, body in everything.items():
        assert servers[1].client().get_object(Bucket="degraded", Key=key)["Body"].read() == body
    servers[3].kill()  # no-op: it is already down
    servers[3].start()
    wait_serving([servers[3]])
    healed = heal(etcd)
    assert healed.returncode == 0, healed.stdout + healed.stderr
    assert "objects below full width: 0" in healed.stdout
    view = status(etcd, CLUSTER)
    assert view["below_full_width"] == 0, view
    text = cluster_cli(etcd, CLUSTER, "status")
    assert "objects below full width (last scans and queues): 0" in text.stdout, text.stdout
    # Full width means any two nodes can go: every object still reads.
    servers[0].kill()
    servers[1].kill()
    for key, body in everything.items():
        assert servers[2].client().get_object(Bucket="degraded", Key=key)["Body"].read() == body
    # Writes need k + 1 = 3 nodes: refused now, with a retryable error.
    with pytest.raises(ClientError) as refused:
        servers[3].client().put_object(Bucket="degraded", Key="late", Body=b"x")
    assert refused.value.response["ResponseMetadata"]["HTTPStatusCode"] == 503
    # Which nodes were down, and what the others answered, is for the log, not the client.
    assert refused.value.response["Error"]["Message"] == \
        "The service cannot handle the request now. Please try again."


def test_a_dead_node_is_replaced_and_the_replacement_rebuilt(tmp_path):
    """n4 dies for good: n5 (a member in no set) takes its place with `fjord cluster replace-node`,
    is marked rebuilding while the others' scans give it its shards, and once `heal --wait` clears
    the mark every object reads with two of the original nodes down."""
    etcd = Etcd(tmp_path)
    etcd.start()
    made = Nodes(tmp_path, etcd)
    try:
        init_topology(etcd, CLUSTER, ["n1", "n2", "n3", "n4"], *LEFTOVER_AGE)
        servers = [made.node(CLUSTER, f"n{i}", extra_args=NODE_ARGS) for i in range(1, 6)]
        for server in servers:
            server.start()
        wait_for(etcd, CLUSTER, lambda v: v["up"] == 5, 30, "5 nodes up")
        wait_serving(servers)
        make_bucket(servers, "moved")
        rng = random.Random(SEED + 5)
        bodies = {f"before/{i}": body_of(rng, rng.choice(SIZES)) for i in range(10)}
        for key, body in bodies.items():
            servers[4].client().put_object(Bucket="moved", Key=key, Body=body)
        servers[3].kill()
        for i in range(6):
            bodies[f"after/{i}"] = body_of(rng, rng.choice(SIZES))
            servers[i % 3].client().put_object(Bucket="moved", Key=f"after/{i}",
                                               Body=bodies[f"after/{i}"])
        wait_for(etcd, CLUSTER, lambda v: v["up"] == 4, 30, "n4 down")

        refused = cluster_cli(etcd, CLUSTER, "remove-node", "n4")
        assert refused.returncode == 1 and "holds a place in a set" in refused.stderr, refused
        taken = cluster_cli(etcd, CLUSTER, "replace-node", "n4", "n2")
        assert taken.returncode == 1 and "n2 already holds a place" in taken.stderr, taken
        unknown = cluster_cli(etcd, CLUSTER, "replace-node", "n4", "n9")
        assert unknown.returncode == 1 and "n9 is not a member" in unknown.stderr, unknown
        alive = cluster_cli(etcd, CLUSTER, "replace-node", "n1", "n5")
        assert alive.returncode == 1 and "n1 is up: stop it first" in alive.stderr, alive
        replaced = cluster_cli(etcd, CLUSTER, "replace-node", "n4", "n5")
        assert replaced.returncode == 0, replaced.stdout + replaced.stderr
        topology = cluster_cli(etcd, CLUSTER, "topology")
        assert "n5 (up, rebuilding)" in topology.stdout and "n4" not in topology.stdout, topology
        for server in servers[:3] + servers[4:]:
            wait_log(server, '"rebuilding":[{"after_heal"')
        # Everything reads while n5 is still empty, through every node that is up.
        for i, (key, body) in enumerate(bodies.items()):
            got = servers[(0, 1, 2, 4)[i % 4]].client().get_object(Bucket="moved", Key=key)
            assert got["Body"].read() == body
        healed = heal(etcd)
        assert healed.returncode == 0, healed.stdout + healed.stderr
        assert "node n5 holds every shard it should" in healed.stdout, healed.stdout
        assert "rebuilding" not in cluster_cli(etcd, CLUSTER, "topology").stdout
        assert not status(etcd, CLUSTER)["topology"].get("rebuilding")
        # The nodes see the mark gone at their next look at etcd (TTL/3); until then n5's answers
        # do not count, and with two nodes down a read would find too few.
        for server in servers[:3] + servers[4:]:
            wait_log(server, '"m":2,"sets":[["n1","n2","n3","n5"]]')
        # n5 holds its shards: with n1 and n2 down as well, n3 and n5 serve everything.
        servers[0].kill()
        servers[1].kill()
        for key, body in bodies.items():
            assert servers[2].client().get_object(Bucket="moved", Key=key)["Body"].read() == body
        removed = cluster_cli(etcd, CLUSTER, "remove-node", "n4")
        assert removed.returncode == 0, removed.stdout + removed.stderr
    finally:
        made.kill_all()
        etcd.kill()


def test_a_node_back_on_an_empty_drive_marks_itself_rebuilding(cluster):
    """A restart on the same drive changes nothing. A restart on an empty drive (the same node id) is
    noticed by the node itself: it marks itself rebuilding before it answers for its shards, healing
    rebuilds it, and then it serves with two other nodes down."""
    etcd, servers = cluster
    make_bucket(servers, "wiped")
    rng = random.Random(SEED + 6)
    bodies = {f"k/{i}": body_of(rng, rng.choice(SIZES)) for i in range(10)}
    for key, body in bodies.items():
        servers[0].client().put_object(Bucket="wiped", Key=key, Body=body)
    n4 = servers[3]
    n4.kill()
    n4.start()
    wait_serving([n4])
    assert "rebuilding" not in cluster_cli(etcd, CLUSTER, "topology").stdout
    n4.kill()
    for d in n4.data_dirs:  # the drive replaced: nothing of the old one is left
        shutil.rmtree(d)
        d.mkdir()
    n4.start()
    wait_log(n4, "marked rebuilding")
    topology = cluster_cli(etcd, CLUSTER, "topology")
    assert "n4 (up, rebuilding)" in topology.stdout, topology.stdout
    for key, body in bodies.items():
        assert servers[1].client().get_object(Bucket="wiped", Key=key)["Body"].read() == body
    healed = heal(etcd)
    assert healed.returncode == 0, healed.stdout + healed.stderr
    assert "node n4 holds every shard it should" in healed.stdout, healed.stdout
    for server in servers:
        wait_log(server, '"m":2,"sets":[["n1","n2","n3","n4"]]')
    servers[0].kill()
    servers[1].kill()
    for key, body in bodies.items():
        assert servers[2].client().get_object(Bucket="wiped", Key=key)["Body"].read() == body


@pytest.fixture
def stale_reader_cluster(tmp_path):
    """Four nodes as `cluster` has them, but n4 reads the map seldom: no watch and a lease TTL of
    300 s, so one read every 100 s (as a node cut off from etcd, which serves on, reads it never)."""
    etcd = Etcd(tmp_path)
    etcd.start()
    made = Nodes(tmp_path, etcd)
    init_topology(etcd, CLUSTER, ["n1", "n2", "n3", "n4"], *LEFTOVER_AGE)
    servers = [made.node(CLUSTER, f"n{i}", extra_args=NODE_ARGS) for i in (1, 2, 3)]
    for server in servers:
        server.start()
    wait_for(etcd, CLUSTER, lambda v: v["up"] == 3, 20, "3 nodes up")
    reader = made.node(CLUSTER, "n4", extra_args=[*NODE_ARGS, "--no-etcd-watch", "--lease-ttl-s", "300"])
    reader.start()
    servers.append(reader)
    wait_serving(servers)
    for server in servers:
        wait_log(server, "4 members, 4 up")
    yield servers
    made.kill_all()
    etcd.kill()


def test_a_wiped_node_is_not_counted_by_a_node_that_has_not_read_its_mark(stale_reader_cluster):
    """A node back on an empty drive marks itself rebuilding in etcd, but a node that reads the map
    seldom (here n4, without a watch and with a lease TTL of 300 s: one read every 100 s; likewise a node cut off from
    etcd) has not seen the mark. A key acknowledged on n1, n2 (then wiped) and n4, read through n4
    while n1 is down, must not read as missing (n3 truly lacks it): n2 says it is rebuilding in its
    answers, so the read waits (503) until n1 is back, then returns the bytes."""
    servers = stale_reader_cluster
    reader = servers[3]
    n1, n2, n3 = servers[:3]
    make_bucket(servers, "stale")
    body = random.Random(SEED + 11).randbytes(70_000)
    seen = log_count(n1, "4 members, 3 up")  # logged while n4 joined, too
    n3.process.send_signal(signal.SIGSTOP)  # the PUT reaches W = 3 nodes: n1, n2 and n4
    try:
        wait_log(n1, "4 members, 3 up", seen=seen)  # n1 passes n3 over rather than wait on it
        n1.client().put_object(Bucket="stale", Key="k", Body=body)
        n1.kill()  # and its heal queue with it: the key stays off n3
    finally:
        n3.process.send_signal(signal.SIGCONT)
    n2.kill()
    for d in n2.data_dirs:
        shutil.rmtree(d)
        d.mkdir()
    n2.start()
    wait_log(n2, "marked rebuilding")
    # n4's map still lacks the mark (its next read is 100 s after its start).
    deadline = time.monotonic() + 6
    while time.monotonic() < deadline:
        try:
            got = reader.client().get_object(Bucket="stale", Key="k")["Body"].read()
            assert False, f"read through n4 with one holder left: {len(got)} bytes"
        except ClientError as e:
            code = e.response["ResponseMetadata"]["HTTPStatusCode"]
            assert code == 503, f"an acknowledged PUT read as {code} through n4"
        time.sleep(0.2)
    n1.start()
    deadline = time.monotonic() + 30
    while True:
        try:
            assert reader.client().get_object(Bucket="stale", Key="k")["Body"].read() == body
            break
        except ClientError as e:
            assert e.response["ResponseMetadata"]["HTTPStatusCode"] == 503, e.response
            assert time.monotonic() < deadline, "the key never read back through n4"
            time.sleep(0.2)


def test_a_bucket_deleted_through_one_node_is_gone_at_once_on_the_others(stale_reader_cluster):
    """A node that reads the map seldom (n4: no watch, a 300 s lease, one read every 100 s) knows a bucket; it
    is deleted through n1. n4 must not answer for it as if it were there (HeadBucket 200, a PUT
    refused with 503): DeleteBucket tells every node, and n4 answers NoSuchBucket at once."""
    servers = stale_reader_cluster
    reader = servers[3]
    make_bucket(servers, "gone")
    servers[0].client().delete_bucket(Bucket="gone")
    with pytest.raises(ClientError) as head:
        reader.client().head_bucket(Bucket="gone")
    assert head.value.response["ResponseMetadata"]["HTTPStatusCode"] == 404
    with pytest.raises(ClientError) as put:
        reader.client().put_object(Bucket="gone", Key="k", Body=b"x")
    assert put.value.response["Error"]["Code"] == "NoSuchBucket"
    assert "gone" not in [b["Name"] for b in reader.client().list_buckets()["Buckets"]]
    servers[1].client().create_bucket(Bucket="gone")  # made again: a new generation, empty
    reader.client().put_object(Bucket="gone", Key="k", Body=b"again")
    assert servers[2].client().get_object(Bucket="gone", Key="k")["Body"].read() == b"again"


def test_an_abort_crossing_a_completion_never_leaves_an_acknowledged_object_unreadable(cluster):
    """CompleteMultipartUpload through n1 and AbortMultipartUpload through n2 at once, twenty times,
    each round started at a different moment of the other: at most one of them succeeds, a completion
    that answered 200 reads back byte for byte through every node (the abort never purged the parts
    it chose), and an upload whose both answers failed is still either completed or abortable."""
    _, servers = cluster
    make_bucket(servers, "race")
    rng = random.Random(SEED + 12)
    for round_ in range(20):
        key = f"race/{round_}"
        body = body_of(rng, rng.choice([1, 70_000, 300_000]))
        upload_id = servers[0].client().create_multipart_upload(Bucket="race", Key=key)["UploadId"]
        etag = servers[2].client().upload_part(Bucket="race", Key=key, UploadId=upload_id,
                                               PartNumber=1, Body=body)["ETag"]
        start = threading.Barrier(2)
        outcome = {}
        delay = rng.uniform(-0.01, 0.01)  # > 0: the abort starts later; < 0: the completion

        def complete():
            client = servers[0].client()
            start.wait()
            time.sleep(max(0.0, -delay))
            try:
                client.complete_multipart_upload(
                    Bucket="race", Key=key, UploadId=upload_id,
                    MultipartUpload={"Parts": [{"PartNumber": 1, "ETag": etag}]})
                outcome["complete"] = 200
            except ClientError as e:
                outcome["complete"] = e.response["Error"]["Code"]

        def abort():
            client = servers[1].client()
            start.wait()
            time.sleep(max(0.0, delay))
            try:
                client.abort_multipart_upload(Bucket="race", Key=key, UploadId=upload_id)
                outcome["abort"] = 204
            except ClientError as e:
                outcome["abort"] = e.response["Error"]["Code"]

        threads = [threading.Thread(target=complete), threading.Thread(target=abort)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=120)
        assert not (outcome["complete"] == 200 and outcome["abort"] == 204), (round_, outcome)
        if outcome["complete"] == 200:
            for server in servers:
                assert server.client().get_object(Bucket="race", Key=key)["Body"].read() == body
        elif outcome["abort"] != 204:
            deadline = time.monotonic() + 30  # both refused (503 past the client's retries)
            while True:
                try:
                    servers[3].client().abort_multipart_upload(Bucket="race", Key=key,
                                                               UploadId=upload_id)
                    break
                except ClientError as e:
                    assert e.response["ResponseMetadata"]["HTTPStatusCode"] == 503, (round_, outcome)
                    assert time.monotonic() < deadline, (round_, outcome)
                    time.sleep(0.2)
        if outcome["complete"] != 200:
            with pytest.raises(ClientError) as absent:
                servers[3].client().get_object(Bucket="race", Key=key)
            assert absent.value.response["Error"]["Code"] == "NoSuchKey", (round_, outcome)


def data_files(server):
    found = []
    for d in server.data_dirs:
        for root, _dirs, files in os.walk(d / "objects"):
            found += [os.path.join(root, f) for f in files]
    return found


def test_damaged_shards_are_never_served_and_are_rebuilt(cluster):
    etcd, servers = cluster
    make_bucket(servers, "rot")
    rng = random.Random(SEED + 2)
    bodies = {f"obj/{i}": body_of(rng, 2_500_000 + i) for i in range(4)}
    for key, body in bodies.items():
        servers[0].client().put_object(Bucket="rot", Key=key, Body=body)
    # Flip a byte in every shard file of one node.
    victim = servers[1]
    flipped = 0
    for path in data_files(victim):
        size = os.path.getsize(path)
        if size < 100_000:
            continue
        with open(path, "r+b") as f:
            f.seek(size // 3)
            byte = f.read(1)
            f.seek(size // 3)
            f.write(bytes([byte[0] ^ 0x5A]))
        flipped += 1
    assert flipped >= len(bodies) // 2
    for key, body in bodies.items():
        for server in servers:
            assert server.client().get_object(Bucket="rot", Key=key)["Body"].read() == body
    healed = heal(etcd)
    assert healed.returncode == 0, healed.stdout + healed.stderr
    # Rebuilt: with two other nodes gone, the victim's shards are needed and sound.
    others = [s for s in servers if s is not victim]
    others[0].kill()
    others[1].kill()
    for key, body in bodies.items():
        assert victim.client().get_object(Bucket="rot", Key=key)["Body"].read() == body


def signed(server, creds, method: str, path: str, body: bytes = b"", query=()):
    headers = s3util.sign_headers(creds, method, server.host, path, query=query,
                                  payload_hash=hashlib.sha256(body).hexdigest()).headers
    url = server.endpoint + path + ("?" + s3util.canonical_query(query) if query else "")
    return requests.request(method, url, data=body, headers=headers, timeout=10)


def test_the_data_plane_takes_only_the_cluster_key(cluster):
    _, servers = cluster
    node = servers[0]
    make_bucket(servers, "guarded")
    path = "/_fjord/cluster/v1/list/c.guarded.0"
    assert requests.get(node.endpoint + path, timeout=10).status_code == 403
    # A user of the S3 API (kept in the cluster's catalog, so known to every node) is not the cluster.
    alice = ("ALICEACCESSKEY0001", "alice-secret-key-0001")
    added = signed(node, node.credentials, "PUT", "/", alice[1].encode(),
                   query=[("fjord-admin-user", alice[0])])
    assert added.status_code == 200, added.text
    alice_creds = s3util.Credentials(alice[0], alice[1], "us-east-1")
    deadline = time.monotonic() + 15
    while signed(servers[1], alice_creds, "GET", "/").status_code != 200:  # seen by another node
        assert time.monotonic() < deadline
        time.sleep(0.2)
    refused = signed(node, alice_creds, "GET", path)
    assert refused.status_code == 403, refused.text
    assert signed(node, node.credentials, "GET", path).status_code == 200
    assert signed(node, node.credentials, "PUT", "/_fjord/cluster/v1/frobnicate/x").status_code == 405


def test_multipart_uploads_complete_without_copying_and_read_from_any_node(cluster, tmp_path):
    etcd, servers = cluster
    make_bucket(servers, "parts")
    rng = random.Random(SEED + 3)
    a, b = servers[0].client(), servers[1].client()
    part_size = 5 * (1 << 20)
    parts = [body_of(rng, part_size), body_of(rng, part_size), body_of(rng, 1_234_567)]
    created = a.create_multipart_upload(Bucket="parts", Key="big/object")
    upload_id = created["UploadId"]
    etags = []
    stale = body_of(rng, part_size)
    for i, body in enumerate(parts, start=1):  # parts through different nodes
        etags.append(servers[i % 4].client().upload_part(Bucket="parts", Key="big/object",
                                                         UploadId=upload_id, PartNumber=i,
                                                         Body=stale if i == 2 else body)["ETag"])
    # A part uploaded again replaces the earlier one.
    stale_etag = etags[1]
    etags[1] = b.upload_part(Bucket="parts", Key="big/object", UploadId=upload_id, PartNumber=2,
                             Body=parts[1])["ETag"]
    assert etags[1] != stale_etag
    listed = servers[2].client().list_parts(Bucket="parts", Key="big/object", UploadId=upload_id)
    assert [p["PartNumber"] for p in listed["Parts"]] == [1, 2, 3]
    assert [p["Size"] for p in listed["Parts"]] == [len(p) for p in parts]
    assert [p["ETag"] for p in listed["Parts"]] == etags
    with pytest.raises(ClientError) as replaced:
        servers[1].client().complete_multipart_upload(
            Bucket="parts", Key="big/object", UploadId=upload_id,
            MultipartUpload={"Parts": [{"PartNumber": 2, "ETag": stale_etag}]})
    assert replaced.value.response["Error"]["Code"] == "InvalidPart"
    uploads = servers[3].client().list_multipart_uploads(Bucket="parts")["Uploads"]
    assert [(u["Key"], u["UploadId"]) for u in uploads] == [("big/object", upload_id)]
    done = servers[3].client().complete_multipart_upload(
        Bucket="parts", Key="big/object", UploadId=upload_id,
        MultipartUpload={"Parts": [{"PartNumber": i + 1, "ETag": e} for i, e in enumerate(etags)]})
    assert done["ETag"].strip('"').endswith("-3")
    whole = b"".join(parts)
    for server in servers:
        got = server.client().get_object(Bucket="parts", Key="big/object")
        assert got["Body"].read() == whole
        assert got["ETag"] == done["ETag"]
        # A retried completion (its answer lost) gets the same answer, through any node
        again = server.client().complete_multipart_upload(
            Bucket="parts", Key="big/object", UploadId=upload_id,
            MultipartUpload={"Parts": [{"PartNumber": i + 1, "ETag": e} for i, e in enumerate(etags)]})
        assert (again["ETag"], again["Key"]) == (done["ETag"], done["Key"])
    # A range across part boundaries, and a copy of the assembled object.
    first, last = part_size - 100, 2 * part_size + 50
    ranged = b.get_object(Bucket="parts", Key="big/object", Range=f"bytes={first}-{last}")
    assert ranged["Body"].read() == whole[first:last + 1]
    a.copy_object(Bucket="parts", Key="copied", CopySource={"Bucket": "parts", "Key": "big/object"})
    assert b.get_object(Bucket="parts", Key="copied")["Body"].read() == whole
    assert not servers[0].client().list_multipart_uploads(Bucket="parts").get("Uploads")
    with pytest.raises(ClientError) as gone:
        a.list_parts(Bucket="parts", Key="big/object", UploadId=upload_id)
    assert gone.value.response["Error"]["Code"] == "NoSuchUpload"
    with pytest.raises(ClientError) as late:  # a part too late changes nothing
        a.upload_part(Bucket="parts", Key="big/object", UploadId=upload_id, PartNumber=2,
                      Body=stale)
    assert late.value.response["Error"]["Code"] == "NoSuchUpload"
    assert b.get_object(Bucket="parts", Key="big/object")["Body"].read() == whole
    # An aborted upload leaves nothing.
    aborted = a.create_multipart_upload(Bucket="parts", Key="never")["UploadId"]
    a.upload_part(Bucket="parts", Key="never", UploadId=aborted, PartNumber=1, Body=b"x" * 1000)
    b.abort_multipart_upload(Bucket="parts", Key="never", UploadId=aborted)
    with pytest.raises(ClientError) as missing:
        a.head_object(Bucket="parts", Key="never")
    assert missing.value.response["Error"]["Code"] in ("404", "NoSuchKey")
    # A node down: the manifest and its parts still read, and healing brings them back to full width.
    servers[2].kill()
    assert a.get_object(Bucket="parts", Key="big/object")["Body"].read() == whole
    servers[2].start()
    wait_serving([servers[2]])
    assert heal(etcd).returncode == 0
    # The aws CLI uploads in parts above 8 MiB.
    source = tmp_path / "cli.bin"
    source.write_bytes(body_of(rng, 9 * (1 << 20) + 3))
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("AWS_")},
           "AWS_ACCESS_KEY_ID": servers[0].access_key, "AWS_SECRET_ACCESS_KEY": servers[0].secret_key,
           "AWS_DEFAULT_REGION": "us-east-1", "AWS_MAX_ATTEMPTS": "1"}
    aws = str(__import__("conftest").REPO_ROOT / ".venv-awscli" / "bin" / "aws")
    copied = subprocess.run([aws, "--endpoint-url", servers[1].endpoint, "s3", "cp", str(source),
                             "s3://parts/cli.bin"], capture_output=True, text=True, env=env, timeout=120)
    assert copied.returncode == 0, copied.stderr
    assert servers[3].client().get_object(Bucket="parts", Key="cli.bin")["Body"].read() == \
        source.read_bytes()
    # An unfinished upload does not keep a bucket: it goes with it (as on AWS and on a single node).
    make_bucket(servers, "brief")
    brief = a.create_multipart_upload(Bucket="brief", Key="half")["UploadId"]
    a.upload_part(Bucket="brief", Key="half", UploadId=brief, PartNumber=1, Body=b"y" * 1000)
    b.delete_bucket(Bucket="brief")
    make_bucket(servers, "brief")
    assert not a.list_multipart_uploads(Bucket="brief").get("Uploads")


def test_a_node_whose_drive_is_full_does_not_stop_writes(tmp_path):
    """One node's data lives on a small tmpfs (root only; skipped elsewhere). Once it is full it answers
    507 for its shards: writes are still acknowledged by the other three, everything reads back, and
    the cluster knows what is below full width until the objects go."""
    small = tmp_path / "small-n4"
    small.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=24m", "tmpfs", str(small)],
                             capture_output=True, text=True)
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.strip()}")
    etcd = Etcd(tmp_path)
    etcd.start()
    made = Nodes(tmp_path, etcd)
    try:
        init_topology(etcd, CLUSTER, ["n1", "n2", "n3", "n4"], *LEFTOVER_AGE)
        servers = [made.node(CLUSTER, f"n{i}", extra_args=NODE_ARGS) for i in range(1, 4)]
        servers.append(made.node(CLUSTER, "n4", work_dir="small-n4", extra_args=NODE_ARGS))
        for server in servers:
            server.start()
        wait_for(etcd, CLUSTER, lambda v: v["up"] == 4, 30, "4 nodes up")
        wait_serving(servers)
        for server in servers:
            wait_log(server, "4 members, 4 up")
        make_bucket(servers, "fill")
        s3 = servers[0].client()
        rng = random.Random(SEED + 4)
        bodies = {}
        for i in range(24):  # 24 x 4 MiB: n4 would need 48 MiB of shards
            bodies[f"o{i}"] = body_of(rng, 4 * (1 << 20))
            s3.put_object(Bucket="fill", Key=f"o{i}", Body=bodies[f"o{i}"])
        for key, body in bodies.items():
            assert servers[2].client().get_object(Bucket="fill", Key=key)["Body"].read() == body
        topology = cluster_cli(etcd, CLUSTER, "topology")
        assert topology.returncode == 0 and "set 0: 4 of 4 up" in topology.stdout, topology.stdout
        # The objects n4 could not take are known to be below full width...
        assert cluster_cli(etcd, CLUSTER, "heal", "--wait", "--timeout-s", "5").returncode == 1
        assert status(etcd, CLUSTER)["below_full_width"] > 0
        # ... until they are gone: tombstones fit, and the older versions are trimmed.
        for key in bodies:
            s3.delete_object(Bucket="fill", Key=key)
        healed = heal(etcd)
        assert healed.returncode == 0, healed.stdout + healed.stderr
    finally:
        made.kill_all()
        etcd.kill()
        subprocess.run(["umount", "-l", str(small)], capture_output=True)
