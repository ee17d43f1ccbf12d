#!/usr/bin/env python3
"""Crash test of versioning in the real `fjord serve` process: no acknowledged version is lost.

A bucket with versioning enabled takes, from several client threads at once, PUTs of new versions (0 B
to --max-put-bytes, across the inline / data-file boundary), DELETEs that leave delete markers, and
DELETEs by version id of versions the same thread wrote; GETs by version id check bytes during the
load. After a seeded random delay the server gets SIGKILL in the middle of that load and is started
again on the same data, and every key's versions (ListObjectVersions, paged two at a time, and a GET of
each version) are checked against the client-side log:

- every acknowledged version (object or delete marker) whose removal was never sent is listed, and an
  object version reads back exactly (sha256 of the bytes the client sent);
- no version whose removal was acknowledged is listed;
- a listed version the client never heard of is one whose PUT or DELETE was sent but not acknowledged
  (its `tag` metadata names the PUT; its bytes are that PUT's);
- per key, the listing is newest first: a version acknowledged before another was sent is listed
  after it, and only the first is IsLatest.

Versions accumulate across cycles, so each cycle checks the earlier cycles' versions again. Content is
a function of (seed, key, tag) and never stored. Exit status 1 on any violation, with the seed and cycle.

    .venv/bin/python tests/crash/versioned_crash_test.py --cycles 20
"""

from __future__ import annotations

import argparse
import hashlib
import random
import shutil
import sys
import tempfile
import threading
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from xml.etree import ElementTree

REPO_ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO_ROOT / "tests" / "integration"))

import conftest  # noqa: E402  (FjordServer, make_client)

BUCKET = "versioned-crash-test"
KiB = 1024
EDGE_SIZES_BYTES = [0, 1, 4095, 4096, 4097, 64 * KiB, 64 * KiB + 1]
THREAD_JOIN_TIMEOUT_S = 120.0


def content(seed: int, key: str, tag: str, size_bytes: int) -> bytes:
    return random.Random(f"{seed}:{key}:{tag}").randbytes(size_bytes)


@dataclass
class Version:
    key: str
    tag: str  # names the PUT (or DELETE) that made it
    marker: bool
    sha256: str | None
    size_bytes: int
    sent_at: float
    acked_at: float | None = None
    version_id: str | None = None


@dataclass
class Removal:
    key: str
    version_id: str
    sent_at: float
    acked_at: float | None = None


@dataclass
class Log:
    lock: threading.Lock = field(default_factory=threading.Lock)
    versions: list = field(default_factory=list)  # every PUT / DELETE sent, all cycles
    removals: list = field(default_factory=list)
    violations: list = field(default_factory=list)
    acked: int = 0
    reads_checked: int = 0


class Client(threading.Thread):
    def __init__(self, seed, log: Log, s3, cycle: int, index: int, keys, max_put_bytes, stop,
                 killing):
        super().__init__(name=f"client-{cycle}-{index}", daemon=True)
        self.seed, self.log, self.s3, self.cycle, self.index = seed, log, s3, cycle, index
        self.keys, self.max_put_bytes, self.stop, self.killing = keys, max_put_bytes, stop, killing
        self.rng = random.Random(f"{seed}:{cycle}:{index}")
        self.mine: list[Version] = []  # acknowledged versions this thread wrote and has not removed

    def run(self):
        for n in range(100_000):
            if self.stop.is_set():
                return
            key = self.rng.choice(self.keys)
            tag = f"c{self.cycle}-t{self.index}-n{n}"
            choice = self.rng.random()
            try:
                if choice < 0.6:
                    self.put(key, tag)
                elif choice < 0.72:
                    self.delete(key, tag)
                elif choice < 0.87 and self.mine:
                    self.remove_version(self.mine.pop(self.rng.randrange(len(self.mine))))
                elif self.mine:
                    self.get(self.rng.choice(self.mine))
            except Exception:  # noqa: BLE001 - a request cut by the kill, or a finding
                if not self.killing.is_set():
                    with self.log.lock:
                        self.log.violations.append(f"{tag}: {traceback.format_exc()}")
                return

    def size(self) -> int:
        if self.rng.random() < 0.3:
            return self.rng.choice(EDGE_SIZES_BYTES)
        return self.rng.randrange(self.max_put_bytes + 1)

    def record(self, v: Version):
        with self.log.lock:
            self.log.versions.append(v)

    def put(self, key: str, tag: str):
        data = content(self.seed, key, tag, self.size())
        v = Version(key, tag, False, hashlib.sha256(data).hexdigest(), len(data), time.monotonic())
        self.record(v)
        answer = self.s3.put_object(Bucket=BUCKET, Key=key, Body=data, Metadata={"tag": tag})
        self.acknowledge(v, answer["VersionId"])

    def delete(self, key: str, tag: str):
        v = Version(key, tag, True, None, 0, time.monotonic())
        self.record(v)
        answer = self.s3.delete_object(Bucket=BUCKET, Key=key)
        if not answer.get("DeleteMarker"):
            raise AssertionError(f"DELETE in a versioned bucket left no marker: {answer}")
        self.acknowledge(v, answer["VersionId"])

    def acknowledge(self, v: Version, version_id: str):
        v.version_id, v.acked_at = version_id, time.monotonic()
        self.mine.append(v)
        with self.log.lock:
            self.log.acked += 1

    def remove_version(self, v: Version):
        r = Removal(v.key, v.version_id, time.monotonic())
        with self.log.lock:
            self.log.removals.append(r)
        self.s3.delete_object(Bucket=BUCKET, Key=v.key, VersionId=v.version_id)
        r.acked_at = time.monotonic()
        with self.log.lock:
            self.log.acked += 1

    def get(self, v: Version):
        if v.marker:
            return
        got = self.s3.get_object(Bucket=BUCKET, Key=v.key, VersionId=v.version_id)["Body"].read()
        if hashlib.sha256(got).hexdigest() != v.sha256:
            with self.log.lock:
                self.log.violations.append(f"{v.key} {v.version_id}: wrong bytes during the load")
        with self.log.lock:
            self.log.reads_checked += 1


def listed_versions(s3) -> dict:
    """key -> [(version_id, is_latest, is_marker)], in listing order (newest first), paged two at a time.
    boto3 parses <Version> and <DeleteMarker> into separate lists, so the order is read from the XML."""
    documents = []

    def keep(http_response, **_):
        documents.append(http_response.content)

    s3.meta.events.register("after-call.s3.ListObjectVersions", keep)
    try:
        for _ in s3.get_paginator("list_object_versions").paginate(
                Bucket=BUCKET, PaginationConfig={"PageSize": 2}):
            pass
    finally:
        s3.meta.events.unregister("after-call.s3.ListObjectVersions", keep)
    out: dict = {}
    for document in documents:
        for element in ElementTree.fromstring(document):
            kind = element.tag.rsplit("}", 1)[-1]
            if kind not in ("Version", "DeleteMarker"):
                continue
            text = {child.tag.rsplit("}", 1)[-1]: child.text for child in element}
            out.setdefault(text["Key"], []).append(
                (text["VersionId"], text["IsLatest"] == "true", kind == "DeleteMarker"))
    return out


def check(seed: int, s3, log: Log, keys) -> list:
    problems = list(log.violations)
    listed = listed_versions(s3)
    acked_removed = {r.version_id for r in log.removals if r.acked_at is not None}
    removal_sent = {r.version_id for r in log.removals}
    by_id = {v.version_id: v for v in log.versions if v.version_id}
    for key in keys:
        entries = listed.get(key, [])
        ids = [e[0] for e in entries]
        if len(set(ids)) != len(ids):
            problems.append(f"{key}: a version is listed twice: {ids}")
        if entries and [e[1] for e in entries] != [True] + [False] * (len(entries) - 1):
            problems.append(f"{key}: IsLatest is not exactly the first version: {entries}")
        for v in log.versions:
            if v.key == key and v.version_id and v.version_id not in removal_sent and \
                    v.version_id not in ids:
                problems.append(f"{key}: acknowledged version {v.version_id} ({v.tag}) is lost")
        unknown_markers = 0
        for version_id, _, marker in entries:
            if version_id in acked_removed:
                problems.append(f"{key}: version {version_id} is listed after its removal was "
                                "acknowledged")
            v = by_id.get(version_id)
            if v is None and marker:
                unknown_markers += 1
                continue
            if v is not None and (v.key != key or v.marker != marker):
                problems.append(f"{key}: version {version_id} is listed as something it is not")
                continue
            if not marker:
                problems += read_version(seed, s3, key, version_id, v, log)
        in_flight_deletes = sum(1 for v in log.versions if v.key == key and v.marker and
                                v.acked_at is None)
        if unknown_markers > in_flight_deletes:
            problems.append(f"{key}: {unknown_markers} delete markers no acknowledged DELETE made, "
                            f"but only {in_flight_deletes} DELETEs were cut by the kill")
        problems += check_order(key, ids, by_id)
    return problems


def read_version(seed: int, s3, key: str, version_id: str, v: Version | None, log: Log) -> list:
    got = s3.get_object(Bucket=BUCKET, Key=key, VersionId=version_id)
    data = got["Body"].read()
    if v is None:  # committed, but its answer was cut by the kill: its tag names the PUT sent
        tag = got["Metadata"].get("tag", "")
        sent = [s for s in log.versions if s.key == key and s.tag == tag and s.acked_at is None]
        if not sent:
            return [f"{key}: version {version_id} (tag {tag!r}) was never sent unacknowledged"]
        v = sent[0]
    if hashlib.sha256(data).hexdigest() != v.sha256 or len(data) != v.size_bytes:
        return [f"{key}: version {version_id} ({v.tag}) reads back wrong bytes"]
    return []


def check_order(key: str, ids: list, by_id: dict) -> list:
    position = {version_id: i for i, version_id in enumerate(ids)}  # 0: newest
    known = [by_id[i] for i in ids if i in by_id and by_id[i].acked_at is not None]
    for older in known:
        for newer in known:
            if older.acked_at < newer.sent_at and position[newer.version_id] > position[older.version_id]:
                return [f"{key}: {newer.version_id} ({newer.tag}) was sent after {older.version_id} "
                        f"({older.tag}) was acknowledged, but is listed as older"]
    return []


def run_cycle(options, server, log: Log, cycle: int, keys) -> tuple[list, float]:
    stop, killing = threading.Event(), threading.Event()
    acked_before = log.acked
    clients = [Client(options.seed, log, conftest.make_client(server), cycle, i, keys,
                      options.max_put_bytes, stop, killing) for i in range(options.threads)]
    delay_s = random.Random(f"{options.seed}:{cycle}:kill").uniform(options.min_delay_s,
                                                                    options.max_delay_s)
    for client in clients:
        client.start()
    stop.wait(delay_s)
    killing.set()  # from here a failed request is one the kill cut
    server.kill()
    stop.set()
    for client in clients:
        client.join(THREAD_JOIN_TIMEOUT_S)
        if client.is_alive():
            raise RuntimeError(f"{client.name} still running {THREAD_JOIN_TIMEOUT_S} s after kill")
    started = time.monotonic()
    server.start()
    recovery_s = time.monotonic() - started
    problems = check(options.seed, conftest.make_client(server), log, keys)
    print(f"cycle {cycle:3d}: acked {log.acked - acked_before:4d}, versions known "
          f"{sum(1 for v in log.versions if v.version_id)}, reads checked {log.reads_checked}, "
          f"recovery {recovery_s:.2f} s" + (f", {len(problems)} VIOLATIONS" if problems else ""),
          flush=True)
    return problems, recovery_s


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cycles", type=int, default=20)
    parser.add_argument("--seed", type=int, default=None, help="default: random (printed)")
    parser.add_argument("--threads", type=int, default=4)
    parser.add_argument("--keys", type=int, default=12)
    parser.add_argument("--max-put-bytes", type=int, default=256 * KiB)
    parser.add_argument("--min-delay-s", type=float, default=0.2)
    parser.add_argument("--max-delay-s", type=float, default=2.0)
    parser.add_argument("--keep", action="store_true", help="keep the data directory on failure")
    options = parser.parse_args(argv)
    if options.seed is None:
        options.seed = random.SystemRandom().randrange(2**32)
    work_dir = Path(tempfile.mkdtemp(prefix="fjord-vcrash-"))
    print(f"versioned crash test: seed={options.seed} cycles={options.cycles} "
          f"threads={options.threads} keys={options.keys} dir={work_dir}", flush=True)
    print(f"replay: .venv/bin/python tests/crash/versioned_crash_test.py --seed {options.seed} "
          f"--cycles {options.cycles} --threads {options.threads} --keys {options.keys} "
          f"--max-put-bytes {options.max_put_bytes}", flush=True)
    keys = [f"ckpt/step-{i:03d}/model.pt" for i in range(options.keys)]
    server = conftest.FjordServer(work_dir, cores=2, name="fjord-vcrash")
    server.start()
    s3 = conftest.make_client(server)
    s3.create_bucket(Bucket=BUCKET)
    s3.put_bucket_versioning(Bucket=BUCKET, VersioningConfiguration={"Status": "Enabled"})
    log = Log()
    failed = False
    recoveries = []
    try:
        for cycle in range(options.cycles):
            try:
                problems, recovery_s = run_cycle(options, server, log, cycle, keys)
                recoveries.append(recovery_s)
            except Exception:  # noqa: BLE001 - reported with the seed and cycle like a violation
                problems = [traceback.format_exc()]
            if problems:
                failed = True
                print(f"FAILED: seed={options.seed} cycle={cycle}", flush=True)
                for problem in problems[:50]:
                    print(f"  - {problem}", flush=True)
                print(f"server log tail:\n{server.log_tail()}", flush=True)
                break
    finally:
        server.kill()
    print(f"summary: seed={options.seed} cycles={len(recoveries)} acknowledged_ops={log.acked} "
          f"versions_known={sum(1 for v in log.versions if v.version_id)} "
          f"removals_acknowledged={sum(1 for r in log.removals if r.acked_at)} "
          f"recovery_s_max={max(recoveries, default=0):.2f} "
          f"result={'FAIL' if failed else 'PASS'}", flush=True)
    if failed and options.keep:
        print(f"data kept in {work_dir}")
    else:
        shutil.rmtree(work_dir, ignore_errors=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
