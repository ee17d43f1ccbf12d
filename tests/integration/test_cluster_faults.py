"""Faults under load on a real 4-node cluster (docs/cluster.md, "Failure model"): while writers PUT, GET
and DELETE through random nodes, an injector kills nodes with SIGKILL, partitions them (their peers'
connections refused), blackholes them (connections hang), and flips bits in shard files of one node.

What must hold: no acknowledged write is lost and no wrong byte is served. Each writer has keys of its
own: every read of them must return the last acknowledged version of its key or a version written after
it whose outcome its writer does not know (a request that failed, or a connection that broke), byte for
byte; a deleted key reads as absent. All writers also race on shared keys with plain and conditional
writes (If-None-Match: *, If-Match) and deletes. Every operation's call and answer is recorded, and
each key's whole history must be linearizable (linearizability.py); a history that is not, or that the
checker cannot decide, is written to build/test-artifacts/linearizability/. After the faults, healing
must bring every object back to full width (`fjord cluster heal --wait`), shown by reading everything
with two nodes down.

FJORD_CLUSTER_FAULTS sets the number of faults (default 200); the seed is the session's (FJORD_TEST_SEED).
"""

from __future__ import annotations

import hashlib
import os
import random
import threading
import time
from dataclasses import dataclass, field

from botocore.exceptions import BotoCoreError, ClientError

from cluster_support import Etcd, Nodes, cluster_cli, init_topology, status, wait_for, wait_serving
from conftest import REPO_ROOT, SEED, make_client
from fault_relay import BLACKHOLE, PASS, REFUSE, Relay
from linearizability import Recorder, check_all

CLUSTER = "faults"
FAULTS = int(os.environ.get("FJORD_CLUSTER_FAULTS", "200"))
WRITERS = 4
KEYS_PER_WRITER = 12
SHARED_KEYS = 2  # raced on by every writer, in half of their operations
ARTIFACTS = REPO_ROOT / "build" / "test-artifacts" / "linearizability"
HEADER = 16
DELETED = -1
UNKNOWN_OUTCOME = {500, 502, 503, 504}


def body_for(value_id: int) -> bytes:
    rng = random.Random(value_id)
    size = rng.choice([HEADER, 1000, 70_000, 600_000, 2_300_000])
    return f"{value_id:016x}".encode() + rng.randbytes(size - HEADER)


@dataclass
class KeyHistory:
    acked: int | None = None            # the last acknowledged value (DELETED, or None: never written)
    unknown: set = field(default_factory=set)  # values written since whose outcome is unknown
    events: list = field(default_factory=list)  # (time, node, what), for the report of a violation

    def allowed(self) -> set:
        return {self.acked} | self.unknown


@dataclass
class Tally:
    faults: list = field(default_factory=list)
    puts_acked: int = 0
    deletes_acked: int = 0
    reads_checked: int = 0
    unavailable: int = 0
    violations: list = field(default_factory=list)
    unexpected: list = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def violation(self, text: str):
        with self.lock:
            self.violations.append(text)


def outcome_unknown(error: Exception) -> bool:
    if isinstance(error, ClientError):
        return error.response["ResponseMetadata"]["HTTPStatusCode"] in UNKNOWN_OUTCOME
    return isinstance(error, BotoCoreError)  # connection refused, reset, timed out


def check_read(history: KeyHistory, key: str, got: bytes | None, tally: Tally, where: str):
    allowed = history.allowed()
    history.events.append((time.time(), where, f"read {'absent' if got is None else got[:HEADER]}"))
    if got is None:
        if DELETED not in allowed and None not in allowed:
            tally.violation(f"{key}: absent on {where}, but {history.acked} was acknowledged; "
                            f"history: {history.events[-12:]}")
        return
    value_id = value_of(got)
    if value_id < 0:
        tally.violation(f"{key}: wrong bytes from {where} ({len(got)} bytes)")
    elif value_id not in allowed:
        tally.violation(f"{key}: read {value_id} from {where}; allowed {sorted(map(str, allowed))}; "
                        f"history: {history.events[-12:]}")
    tally.reads_checked += 1


def value_of(got: bytes) -> int:
    """The value a body was written for, or -2 when its bytes are not that value's."""
    value_id = int(got[:HEADER], 16) if len(got) >= HEADER else -2
    if value_id < 0 or hashlib.sha256(got).digest() != hashlib.sha256(body_for(value_id)).digest():
        return -2
    return value_id


def read_with_etag(client, key):
    try:
        answer = client.get_object(Bucket="load", Key=key)
        return answer["Body"].read(), answer["ETag"]
    except ClientError as e:
        if e.response["Error"]["Code"] == "NoSuchKey":
            return None, None
        raise


def recorded_read(recorder: Recorder, key: str, client, name: str):
    """A read, recorded: the bytes (None: absent) and their ETag."""
    op = recorder.begin(key, name, "get", note=name)
    try:
        got, etag = read_with_etag(client, key)
    except (ClientError, BotoCoreError):
        recorder.drop(key, op)
        raise
    recorder.finish(op, value=None if got is None else value_of(got))
    return got, etag


def recorded_write(recorder: Recorder, key: str, name: str, kind: str, send, value=None,
                   expected=None):
    """Sends a write and records its outcome: "ok", "failed" (412) or "absent" (404 to an If-Match);
    "conflict" (409: it crossed another write and did not happen) leaves it out of the history. With
    no answer that says (5xx, a broken connection) its outcome is unknown, and the error is raised."""
    op = recorder.begin(key, name, kind, value=value, expected=expected, note=name)
    try:
        send()
    except ClientError as e:
        code = e.response["Error"]["Code"]
        if code == "PreconditionFailed":
            recorder.finish(op, outcome="failed")
            return "failed"
        if code == "NoSuchKey" and kind in ("replace", "remove"):
            recorder.finish(op, outcome="absent")
            return "absent"
        if code == "ConditionalRequestConflict":  # crossed another write and did not happen
            recorder.drop(key, op)
            return "conflict"
        if outcome_unknown(e):
            recorder.unknown(op, code)
        else:
            recorder.drop(key, op)  # the test's own mistake; reported as unexpected
        raise
    except BotoCoreError as e:
        recorder.unknown(op, type(e).__name__)
        raise
    recorder.finish(op, outcome="ok")
    return "ok"


def own_key_step(rng, key, history: KeyHistory, node, client, recorder, tally, next_value):
    """One operation on a key of this writer's own: put, read or delete."""
    roll = rng.random()
    what = ""
    try:
        if roll < 0.55:
            what = f"put {next_value:016x}"
            history.unknown.add(next_value)
            recorded_write(recorder, key, node, "put", value=next_value, send=lambda: client.put_object(
                Bucket="load", Key=key, Body=body_for(next_value)))
            history.acked, history.unknown = next_value, set()
            history.events.append((time.time(), node, what + " acked"))
            tally.puts_acked += 1
        elif roll < 0.9:
            check_read(history, key, recorded_read(recorder, key, client, node)[0], tally, node)
        else:
            what = "delete"
            history.unknown.add(DELETED)
            recorded_write(recorder, key, node, "delete",
                           send=lambda: client.delete_object(Bucket="load", Key=key))
            history.acked, history.unknown = DELETED, set()
            history.events.append((time.time(), node, what + " acked"))
            tally.deletes_acked += 1
    except (ClientError, BotoCoreError) as e:
        if what:
            history.events.append((time.time(), node, what + f" failed: {str(e)[:60]}"))
        raise


def shared_key_step(rng, key, node, client, recorder, tally, value):
    """One operation on a key every writer uses: a read, a read-modify-write (a read, then a write
    or, one time in four, a DELETE with If-Match naming the ETag it read, as an optimistic client
    updates), a create-only write, a plain write or a delete. Only the recorded history judges
    these."""
    roll = rng.random()
    body = body_for(value)
    if roll < 0.6:
        got, etag = recorded_read(recorder, key, client, node)
        tally.reads_checked += 1
        if got is not None and value_of(got) < 0:
            tally.violation(f"{key}: wrong bytes from {node} ({len(got)} bytes)")
        if roll < 0.25 or got is None:
            return
        if rng.random() < 0.25:
            recorded_write(recorder, key, node, "remove", expected=value_of(got),
                           send=lambda: client.delete_object(Bucket="load", Key=key, IfMatch=etag))
            return
        recorded_write(recorder, key, node, "replace", value=value, expected=value_of(got),
                       send=lambda: client.put_object(Bucket="load", Key=key, Body=body, IfMatch=etag))
    elif roll < 0.75:
        recorded_write(recorder, key, node, "create", value=value, send=lambda: client.put_object(
            Bucket="load", Key=key, Body=body, IfNoneMatch="*"))
    elif roll < 0.9:
        recorded_write(recorder, key, node, "put", value=value,
                       send=lambda: client.put_object(Bucket="load", Key=key, Body=body))
    else:
        recorded_write(recorder, key, node, "delete",
                       send=lambda: client.delete_object(Bucket="load", Key=key))


def writer(index: int, clients, histories, recorder: Recorder, tally: Tally, stop: threading.Event):
    rng = random.Random(SEED * 1000 + index)
    keys = [f"w{index}/k{j}" for j in range(KEYS_PER_WRITER)]
    shared = [f"shared/k{j}" for j in range(SHARED_KEYS)]
    next_value = (index + 1) << 40
    while not stop.is_set():
        node, client = rng.choice(clients)
        next_value += 1
        key = rng.choice(shared) if rng.random() < 0.5 else rng.choice(keys)
        try:
            if key in histories:
                own_key_step(rng, key, histories[key], node, client, recorder, tally, next_value)
            else:
                shared_key_step(rng, key, node, client, recorder, tally, next_value)
        except (ClientError, BotoCoreError) as e:
            if outcome_unknown(e):
                tally.unavailable += 1
            else:
                with tally.lock:
                    tally.unexpected.append(f"{key} via {node}: {e}")


def check_histories(recorder: Recorder) -> str:
    """Every key's history linearizable; the report's summary line."""
    report = check_all(recorder.by_key, ARTIFACTS, budget=10_000_000)
    summary = (f"{report.operations} operations on {report.keys} keys checked for linearizability "
               f"({report.unknown} writes of unknown outcome, {report.steps} search steps, at most "
               f"{report.most_steps} for one key)")
    problems = [f"{key}: {v.explain()}; history in {path}"
                for key, v, path in report.failures + report.undecided]
    assert not problems, "\n".join(problems) + "\n" + summary
    return summary


def flip_a_byte(server, rng: random.Random) -> str | None:
    files = []
    for d in server.data_dirs:
        for root, _dirs, names in os.walk(d / "objects"):
            files += [os.path.join(root, n) for n in names]
    files = [f for f in files if os.path.exists(f) and os.path.getsize(f) > 64 * 1024]
    if not files:
        return None
    victim = rng.choice(files)
    try:
        with open(victim, "r+b") as f:
            size = os.fstat(f.fileno()).st_size
            at = rng.randrange(size)
            f.seek(at)
            byte = f.read(1)
            f.seek(at)
            f.write(bytes([byte[0] ^ 0xFF]))
    except OSError:
        return None
    return f"{os.path.basename(victim)}@{at}"


def inject(servers, relays, tally: Tally, stop: threading.Event):
    """One fault at a time, so that at most one node is away while the rot of n4 waits to be healed:
    two failures, the parity of 2+2."""
    rng = random.Random(SEED + 7)
    rotting = servers[3]
    while len(tally.faults) < FAULTS:
        kind = rng.choice(["kill", "partition", "blackhole", "rot"])
        i = rng.randrange(len(servers))
        hold_s = rng.uniform(0.2, 1.2)
        if kind == "kill":
            servers[i].kill()
            time.sleep(hold_s)
            servers[i].start()
        elif kind in ("partition", "blackhole"):
            relays[i].set_mode(REFUSE if kind == "partition" else BLACKHOLE)
            time.sleep(hold_s)
            relays[i].set_mode(PASS)
        else:
            where = flip_a_byte(rotting, rng)
            if where is None:
                continue
            i = 3
            time.sleep(0.1)
        tally.faults.append((kind, servers[i].name))
        time.sleep(rng.uniform(0.05, 0.3))
    stop.set()


def test_no_acknowledged_write_is_lost_and_no_wrong_byte_served_under_faults(tmp_path):
    etcd = Etcd(tmp_path)
    etcd.start()
    made = Nodes(tmp_path, etcd)
    relays = []
    try:
        init_topology(etcd, CLUSTER, ["n1", "n2", "n3", "n4"], "--heal-leftover-age-s", "2")
        servers = []
        for i in range(1, 5):
            server = made.node(CLUSTER, f"n{i}", extra_args=["--heal-scan-interval-s", "5"])
            relay = Relay(server.port)
            server.extra_args += ["--advertise", relay.address]
            servers.append(server)
            relays.append(relay)
        for server in servers:
            server.start()
        wait_for(etcd, CLUSTER, lambda v: v["up"] == 4, 30, "4 nodes up")
        wait_serving(servers)
        first = make_client(servers[0])
        first.create_bucket(Bucket="load")
        for server in servers:  # the bucket's record reaches every node through etcd
            deadline = time.monotonic() + 15
            while True:
                try:
                    make_client(server).head_bucket(Bucket="load")
                    break
                except ClientError:
                    assert time.monotonic() < deadline
                    time.sleep(0.1)

        clients = [(s.name, make_client(s, read_timeout=30, connect_timeout=5)) for s in servers]
        histories = {f"w{w}/k{j}": KeyHistory() for w in range(WRITERS) for j in range(KEYS_PER_WRITER)}
        recorder = Recorder()
        tally = Tally()
        stop = threading.Event()
        threads = [threading.Thread(target=writer, args=(w, clients, histories, recorder, tally, stop))
                   for w in range(WRITERS)]
        for t in threads:
            t.start()
        inject(servers, relays, tally, stop)
        for t in threads:
            t.join(timeout=120)
        assert not any(t.is_alive() for t in threads), "a writer hung"

        for relay in relays:
            relay.set_mode(PASS)
        wait_for(etcd, CLUSTER, lambda v: v["up"] == 4, 30, "4 nodes up after the faults")
        healed = cluster_cli(etcd, CLUSTER, "heal", "--wait", "--timeout-s", "180")
        summary = (f"{len(tally.faults)} faults ({', '.join(sorted({k for k, _ in tally.faults}))}), "
                   f"{tally.puts_acked} PUTs and {tally.deletes_acked} DELETEs acknowledged, "
                   f"{tally.reads_checked} reads checked, {tally.unavailable} refused or broken off")
        print(summary)
        assert not tally.violations, "\n".join(tally.violations[:20]) + "\n" + summary
        assert not tally.unexpected, "\n".join(tally.unexpected[:20]) + "\n" + summary
        assert len(tally.faults) >= FAULTS
        assert tally.puts_acked > 0 and tally.reads_checked > 0, summary
        assert healed.returncode == 0, healed.stdout + healed.stderr
        assert status(etcd, CLUSTER)["below_full_width"] == 0

        # Every object at full width: any two nodes may go and everything still reads, exactly.
        # The reads go into the histories too: after the faults, every key must still read as the
        # writes allow.
        shared = [f"shared/k{j}" for j in range(SHARED_KEYS)]
        final = Tally()
        for name, client in clients:
            for key, history in histories.items():
                check_read(history, key, recorded_read(recorder, key, client, f"{name} after")[0],
                           final, name)
            for key in shared:
                recorded_read(recorder, key, client, f"{name} after")
        servers[0].kill()
        servers[1].kill()
        survivor = make_client(servers[2])
        for key, history in histories.items():
            check_read(history, key, recorded_read(recorder, key, survivor, "n3 alone")[0], final,
                       "n3 with n1 and n2 down")
        for key in shared:
            recorded_read(recorder, key, survivor, "n3 alone")
        assert not final.violations, "\n".join(final.violations[:20])
        print(check_histories(recorder))
    finally:
        made.kill_all()
        for relay in relays:
            relay.close()
        etcd.kill()
