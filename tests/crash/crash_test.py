#!/usr/bin/env python3
"""Crash-consistency test of the real `fjord serve` process.

Each cycle, several client threads write a small key space concurrently (PUTs of 0 B to 12 MiB,
multipart uploads, overwrites, DELETEs, and GETs that check what they read); after a seeded random
delay the server gets SIGKILL in the middle of that load, is started again on the same data
directory, and every key is checked against the client-side log of what was sent and acknowledged:

- a key holds one whole version (sha256 of the body, the `version` metadata and the size all agree)
  that it may hold: a write not known to be overwritten by a later acknowledged write (an operation
  acknowledged before another was sent is ordered before it; overlapping ones may commit in either
  order; an unacknowledged one may or may not have committed);
- ListObjectsV2 shows exactly the keys HEAD finds, with the same size and ETag;
- every acknowledged CreateMultipartUpload whose upload was neither completed nor aborted is still
  listed, with all its acknowledged parts, unless its (sent, unacknowledged) Complete took effect;
  acknowledged Completes and Aborts leave no upload behind; no upload appears that no client
  created.

Surviving uploads are then completed (and read back) or aborted, so each cycle starts clean. Content
is a function of (seed, key, version) and never stored; a version id names the cycle, thread and
operation that wrote it. `--seed` replays the same plan (operations, sizes, contents, kill delays);
the interleaving of the threads, and so the exact moment of the kill within the load, is the
scheduler's. Exit status 1 on any violation, with the seed, cycle and key.

    .venv/bin/python tests/crash/crash_test.py --cycles 50
    .venv/bin/python tests/crash/crash_test.py --seed 1234 --cycles 50 --keep
"""

from __future__ import annotations

import argparse
import hashlib
import math
import random
import shutil
import sys
import tempfile
import threading
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO_ROOT / "tests" / "integration"))

from botocore.exceptions import (  # noqa: E402
    ClientError, IncompleteReadError, ResponseStreamingError)

import conftest  # noqa: E402  (FjordServer, make_client; it also scrubs AWS_* from the environment)
import s3util  # noqa: E402
from s3util import KiB, MiB  # noqa: E402

BUCKET = "crash-test"
PART_SIZE_BYTES = 5 * MiB
EDGE_SIZES_BYTES = [0, 1, 4095, 4096, 4097, 64 * KiB, 64 * KiB + 1, MiB, MiB + 1]
MAX_OPERATIONS_PER_THREAD = 10_000  # a bound on one cycle's plan; the kill comes long before it
THREAD_JOIN_TIMEOUT_S = 120.0


# --------------------------------------------------------------------------------------------------
# Deterministic content
# --------------------------------------------------------------------------------------------------

def content(seed: int, key: str, version: str, size_bytes: int) -> bytes:
    return random.Random(f"{seed}:{key}:{version}").randbytes(size_bytes)


def multipart_sizes(total_bytes: int) -> list[int]:
    full, tail = divmod(total_bytes, PART_SIZE_BYTES)
    return [PART_SIZE_BYTES] * full + ([tail] if tail else [])


# --------------------------------------------------------------------------------------------------
# The log of what clients sent and what the server acknowledged
# --------------------------------------------------------------------------------------------------

@dataclass
class Write:
    """One write to a key: a PUT, a multipart Complete, or a DELETE (sha256 None)."""
    key: str
    version: str
    kind: str                 # "put", "multipart" or "delete"
    sha256: str | None
    size_bytes: int
    sent_at: float            # time.monotonic() just before the request was sent
    acked_at: float | None = None   # just after the success response arrived; None: in flight
    error: str | None = None

    def describe(self) -> str:
        state = "acked" if self.acked_at is not None else "in flight"
        body = ("absent" if self.sha256 is None
                else f"sha256 {self.sha256[:16]}.. {self.size_bytes} B")
        return f"{self.kind} {self.version} ({state}; {body})"


@dataclass
class Upload:
    """One multipart upload as the client saw it."""
    key: str
    version: str
    upload_id: str | None = None          # None until CreateMultipartUpload is acknowledged
    create_sent_at: float = 0.0
    parts_acked: dict = field(default_factory=dict)    # part number -> (size, ETag)
    parts_sent: set = field(default_factory=set)
    complete: Write | None = None         # the Complete as a write to the key, once sent
    abort_sent: bool = False
    abort_acked: bool = False


@dataclass
class KeyState:
    """What a key held when a cycle began (verified); version None: absent."""
    version: str | None = None
    sha256: str | None = None
    size_bytes: int = 0


class CycleLog:
    """Everything the threads of one cycle did; appended under a lock."""

    def __init__(self):
        self.lock = threading.Lock()
        self.writes: list[Write] = []
        self.uploads: list[Upload] = []
        self.violations: list[str] = []
        self.acked = 0
        self.reads_checked = 0
        self.requests_cut = 0   # requests failed by the kill (in progress or just sent)
        self.dead_at = math.inf  # when the killed server was reaped
        self.cut_reads: list[str] = []  # GETs cut short before the kill (see Client.get)

    def writes_to(self, key: str) -> list:
        """The writes to `key` that may have reached the server (sent before it was reaped)."""
        return [w for w in self.writes if w.key == key and w.sent_at < self.dead_at]

    def add_write(self, write: Write):
        with self.lock:
            self.writes.append(write)

    def add_upload(self, upload: Upload):
        with self.lock:
            self.uploads.append(upload)

    def ack(self):
        with self.lock:
            self.acked += 1

    def violation(self, text: str):
        with self.lock:
            self.violations.append(text)


class Run:
    """State shared by all cycles: options, every version's digest, each key's verified state."""

    def __init__(self, options):
        self.options = options
        self.seed = options.seed
        self.keys = [f"obj/{index:02d}" for index in range(options.keys)]
        # version -> {(sha256, size)}: every version ever sent (a multipart upload completed after
        # the crash from its surviving parts adds its shorter body under the same version).
        self.versions: dict[str, set] = {}
        self.versions_lock = threading.Lock()
        self.state = {key: KeyState() for key in self.keys}

    def remember(self, version: str, sha256: str, size_bytes: int):
        with self.versions_lock:
            self.versions.setdefault(version, set()).add((sha256, size_bytes))

    def known_digests(self, key: str) -> set:
        prefix = f"{key}@"
        with self.versions_lock:
            return {digest for version, bodies in self.versions.items()
                    if version.startswith(prefix) for digest, _ in bodies}


# --------------------------------------------------------------------------------------------------
# Load: one client thread
# --------------------------------------------------------------------------------------------------

def choose_size(rng: random.Random, max_bytes: int) -> int:
    if rng.random() < 0.25:
        return rng.choice([s for s in EDGE_SIZES_BYTES if s <= max_bytes])
    return min(max_bytes, int(2 ** rng.uniform(0, math.log2(max_bytes + 1))))


class Client(threading.Thread):
    """Runs one seeded plan of operations until `stop` is set; records every request in the log.
    An error before the kill is a violation; after it, the request counts as in flight."""

    def __init__(self, run: Run, log: CycleLog, s3, cycle: int, index: int,
                 stop: threading.Event, killed_at: list):
        super().__init__(daemon=True, name=f"client-{index}")
        self.run_state, self.log, self.s3 = run, log, s3
        self.cycle, self.index = cycle, index
        self.stop, self.killed_at = stop, killed_at
        self.rng = random.Random(f"{run.seed}:{cycle}:client{index}")

    def run(self):
        for number in range(MAX_OPERATIONS_PER_THREAD):
            if self.stop.is_set():
                return
            key = self.rng.choice(self.run_state.keys)
            version = f"{key}@c{self.cycle}t{self.index}n{number}"
            draw = self.rng.random()
            try:
                if draw < 0.50:
                    self.put(key, version)
                elif draw < 0.65:
                    self.multipart(key, version)
                elif draw < 0.85:
                    self.delete(key, version)
                else:
                    self.get(key)
            except Exception as error:  # noqa: BLE001 - classified below
                if not self.after_kill():
                    self.log.violation(f"{version}: request failed before the kill: {error!r}")
                with self.log.lock:
                    self.log.requests_cut += 1
                return

    def after_kill(self) -> bool:
        return bool(self.killed_at)

    def put(self, key: str, version: str):
        size_bytes = choose_size(self.rng, self.run_state.options.max_put_bytes)
        data = content(self.run_state.seed, key, version, size_bytes)
        digest = s3util.sha256_hex(data)
        self.run_state.remember(version, digest, size_bytes)
        write = Write(key, version, "put", digest, size_bytes, time.monotonic())
        self.log.add_write(write)
        self.s3.put_object(Bucket=BUCKET, Key=key, Body=data, Metadata={"version": version})
        write.acked_at = time.monotonic()
        self.log.ack()

    def delete(self, key: str, version: str):
        write = Write(key, version, "delete", None, 0, time.monotonic())
        self.log.add_write(write)
        self.s3.delete_object(Bucket=BUCKET, Key=key)
        write.acked_at = time.monotonic()
        self.log.ack()

    def multipart(self, key: str, version: str):
        options = self.run_state.options
        parts = self.rng.randint(2, options.max_parts)
        size_bytes = (parts - 1) * PART_SIZE_BYTES + self.rng.randint(1, PART_SIZE_BYTES)
        abort = self.rng.random() < 0.15
        data = content(self.run_state.seed, key, version, size_bytes)
        digest = s3util.sha256_hex(data)
        self.run_state.remember(version, digest, size_bytes)
        upload = Upload(key, version, create_sent_at=time.monotonic())
        self.log.add_upload(upload)
        response = self.s3.create_multipart_upload(Bucket=BUCKET, Key=key,
                                                   Metadata={"version": version})
        upload.upload_id = response["UploadId"]
        self.log.ack()
        offset = 0
        etags = []
        for number, part_bytes in enumerate(multipart_sizes(size_bytes), start=1):
            if self.stop.is_set():
                return  # left unfinished on purpose: it must survive the crash
            upload.parts_sent.add(number)
            response = self.s3.upload_part(Bucket=BUCKET, Key=key, UploadId=upload.upload_id,
                                           PartNumber=number, Body=data[offset:offset + part_bytes])
            upload.parts_acked[number] = (part_bytes, response["ETag"])
            etags.append({"PartNumber": number, "ETag": response["ETag"]})
            offset += part_bytes
            self.log.ack()
        if self.stop.is_set():
            return
        if abort:
            upload.abort_sent = True
            self.s3.abort_multipart_upload(Bucket=BUCKET, Key=key, UploadId=upload.upload_id)
            upload.abort_acked = True
            self.log.ack()
            return
        write = Write(key, version, "multipart", digest, size_bytes, time.monotonic())
        upload.complete = write
        self.log.add_write(write)
        self.s3.complete_multipart_upload(Bucket=BUCKET, Key=key, UploadId=upload.upload_id,
                                          MultipartUpload={"Parts": etags})
        write.acked_at = time.monotonic()
        self.log.ack()

    def get(self, key: str):
        """A read during the load must return one whole version that some client wrote."""
        try:
            response = self.s3.get_object(Bucket=BUCKET, Key=key)
        except ClientError as error:
            if error.response["Error"]["Code"] == "NoSuchKey":
                return
            raise
        try:
            digest, size_bytes = s3util.stream_sha256_hex(response["Body"])
        except (IncompleteReadError, ResponseStreamingError) as error:
            if self.after_kill():
                raise
            # The server opens an object's data files before sending its first byte, so a delete or
            # overwrite meanwhile cannot cut a GET short (objects of over 1,024 parts excepted); a short
            # read is a violation unless --lenient-reads.
            text = f"GET {key} during load cut short: {error!r}"
            with self.log.lock:
                self.log.cut_reads.append(text)
            if not self.run_state.options.lenient_reads:
                self.log.violation(text)
            return
        self.log.ack()
        version = response.get("Metadata", {}).get("version")
        with self.run_state.versions_lock:
            known = set(self.run_state.versions.get(version, ()))
        if (digest, size_bytes) not in known:
            self.log.violation(
                f"GET {key} during load returned sha256 {digest} ({size_bytes} B) with version "
                f"metadata {version!r}, expected {known}; written digests of this key: "
                f"{sorted(d[:16] for d in self.run_state.known_digests(key))}")
        with self.log.lock:
            self.log.reads_checked += 1


# --------------------------------------------------------------------------------------------------
# Expectations after the crash
# --------------------------------------------------------------------------------------------------

def allowed_states(initial: KeyState, writes: list[Write]) -> list:
    """The states a key may hold: its initial state if no write was acknowledged, and every write
    that no acknowledged write was sent after (those are ordered after it and overwrite it).
    Entries are Write objects, or the KeyState when the initial state remains possible."""
    acked = [w for w in writes if w.acked_at is not None]
    candidates = [w for w in writes
                  if not any(b is not w and b.sent_at > (w.acked_at if w.acked_at is not None
                                                         else math.inf) for b in acked)]
    if not acked:
        candidates.append(initial)
    return candidates


def check_allowed_states():
    """The oracle on hand-made histories, run before every test: a checker that accepted anything
    would make the whole test unable to fail."""
    initial = KeyState("k@old", "old", 3)
    a = Write("k", "k@a", "put", "a", 1, sent_at=1.0, acked_at=2.0)
    b = Write("k", "k@b", "put", "b", 1, sent_at=3.0, acked_at=4.0)
    c = Write("k", "k@c", "delete", None, 0, sent_at=3.5, acked_at=None)
    d = Write("k", "k@d", "put", "d", 1, sent_at=1.5, acked_at=5.0)

    def digests(writes):
        return {state_digest(x) for x in allowed_states(initial, writes)}

    assert digests([]) == {"old"}
    assert digests([c]) == {"old", None}
    assert digests([a]) == {"a"}
    assert digests([a, b]) == {"b"}            # b was sent after a was acknowledged
    assert digests([a, b, c]) == {"b", None}   # c was in flight: may have landed after b
    assert digests([a, b, d]) == {"b", "d"}    # d overlaps b: either order
    assert digests([a, d]) == {"a", "d"}       # d overlaps a


def state_digest(candidate) -> str | None:
    return candidate.sha256


def describe_candidate(candidate) -> str:
    if isinstance(candidate, KeyState):
        if candidate.version is None:
            return "initial state (absent)"
        return (f"initial state {candidate.version} (sha256 {candidate.sha256[:16]}.. "
                f"{candidate.size_bytes} B)")
    return candidate.describe()


@dataclass
class Found:
    version: str | None = None
    sha256: str | None = None
    size_bytes: int = 0
    etag: str | None = None


def read_key(s3, key: str, problems: list) -> Found:
    """HEAD then GET; checks that both agree. Absent: Found() with sha256 None."""
    try:
        head = s3.head_object(Bucket=BUCKET, Key=key)
    except ClientError as error:
        if error.response["ResponseMetadata"]["HTTPStatusCode"] != 404:
            problems.append(f"HEAD {key}: {error.response['Error']}")
        head = None
    try:
        response = s3.get_object(Bucket=BUCKET, Key=key)
    except ClientError as error:
        if error.response["Error"]["Code"] != "NoSuchKey":
            problems.append(f"GET {key}: {error.response['Error']}")
        if head is not None:
            problems.append(f"{key}: HEAD found it ({head['ContentLength']} B) but GET did not")
        return Found()
    digest, size_bytes = s3util.stream_sha256_hex(response["Body"])
    found = Found(response.get("Metadata", {}).get("version"), digest, size_bytes,
                  response["ETag"])
    if head is None:
        problems.append(f"{key}: GET found it but HEAD did not")
    elif (head["ContentLength"], head["ETag"], head.get("Metadata", {}).get("version")) != (
            size_bytes, found.etag, found.version):
        problems.append(f"{key}: HEAD says {head['ContentLength']} B, ETag {head['ETag']}, "
                        f"version {head.get('Metadata', {}).get('version')}; GET returned "
                        f"{size_bytes} B, ETag {found.etag}, version {found.version}")
    return found


def verify_key(run: Run, key: str, found: Found, writes: list[Write], problems: list):
    candidates = allowed_states(run.state[key], writes)
    match = next((c for c in candidates if state_digest(c) == found.sha256), None)
    if found.sha256 is not None:
        known = run.versions.get(found.version, set())
        if (found.sha256, found.size_bytes) not in known:
            problems.append(f"{key}: body sha256 {found.sha256} ({found.size_bytes} B) is not the "
                            f"version its metadata names ({found.version!r}: {known}): corrupted "
                            f"or mixed")
            return
    if match is None:
        what = "absent" if found.sha256 is None else (
            f"{found.version} (sha256 {found.sha256[:16]}.. {found.size_bytes} B)")
        history = "\n      ".join(w.describe() + f" sent {w.sent_at:.3f}" +
                                   (f" acked {w.acked_at:.3f}" if w.acked_at else "")
                                   for w in writes)
        problems.append(f"{key}: found {what}; allowed: "
                        f"{'; '.join(describe_candidate(c) for c in candidates)}\n"
                        f"    initial: {describe_candidate(run.state[key])}\n"
                        f"    this cycle's writes:\n      {history or '(none)'}")


def listed_objects(s3) -> dict:
    listed = {}
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=BUCKET):
        for item in page.get("Contents", []):
            listed[item["Key"]] = (item["Size"], item["ETag"])
    return listed


def listed_uploads(s3) -> list:
    uploads = []
    for page in s3.get_paginator("list_multipart_uploads").paginate(Bucket=BUCKET):
        uploads += [(item["Key"], item["UploadId"]) for item in page.get("Uploads", [])]
    return uploads


def listed_parts(s3, key: str, upload_id: str) -> dict:
    parts = {}
    for page in s3.get_paginator("list_parts").paginate(Bucket=BUCKET, Key=key, UploadId=upload_id):
        for item in page.get("Parts", []):
            parts[item["PartNumber"]] = (item["Size"], item["ETag"])
    return parts


def verify_uploads(s3, log: CycleLog, found: dict, problems: list) -> list:
    """Checks the listed multipart uploads against the log; returns the surviving known uploads."""
    listed = listed_uploads(s3)
    by_id = {u.upload_id: u for u in log.uploads if u.upload_id is not None}
    survivors = []
    unknown_by_key: dict = {}
    for key, upload_id in listed:
        upload = by_id.get(upload_id)
        if upload is None:
            unknown_by_key[key] = unknown_by_key.get(key, 0) + 1
            continue
        if upload.key != key:
            problems.append(f"upload {upload_id} listed under {key}, created for {upload.key}")
        if upload.abort_acked:
            problems.append(f"{upload.version}: upload {upload_id} aborted (acked), still listed")
        elif upload.complete is not None and upload.complete.acked_at is not None:
            problems.append(f"{upload.version}: upload {upload_id} completed (acked), still listed")
        elif found[key].version == upload.version:
            problems.append(f"{upload.version}: upload {upload_id} took effect ({key} holds it) "
                            f"but is still listed")
        else:
            survivors.append(upload)
    for key, count in unknown_by_key.items():
        unacked_creates = sum(1 for u in log.uploads if u.key == key and u.upload_id is None)
        if count > unacked_creates:
            problems.append(f"{key}: {count} listed uploads that no client created "
                            f"({unacked_creates} CreateMultipartUpload in flight at the kill)")
    survivor_ids = {u.upload_id for u in survivors}
    for upload in log.uploads:
        if upload.upload_id is None or upload.upload_id in survivor_ids or upload.abort_sent:
            continue
        if upload.complete is None:
            problems.append(f"{upload.version}: upload {upload.upload_id} (created, acked; never "
                            f"completed or aborted) is gone after the crash")
        elif (upload.complete.acked_at is None
              and not complete_may_have_happened(upload, found, log)):
            problems.append(f"{upload.version}: upload {upload.upload_id} is gone but its unacked "
                            f"Complete did not take effect ({upload.key} holds "
                            f"{found[upload.key].version})")
    for upload in survivors:
        parts = listed_parts(s3, upload.key, upload.upload_id)
        for number, (size_bytes, etag) in upload.parts_acked.items():
            if parts.get(number) != (size_bytes, etag):
                problems.append(f"{upload.version}: acked part {number} ({size_bytes} B, {etag}) "
                                f"listed as {parts.get(number)} after the crash")
        for number in parts:
            if number not in upload.parts_sent:
                problems.append(f"{upload.version}: part {number} listed but never sent")
    return survivors


def complete_may_have_happened(upload: Upload, found: dict, log: CycleLog) -> bool:
    """An unacked Complete took effect if the key holds its version, or holds a write that may have
    committed after it (one not acknowledged before the Complete was sent)."""
    holder = found[upload.key]
    if upload.complete.sent_at >= log.dead_at:
        return False
    if holder.version == upload.version:
        return True
    sent = upload.complete.sent_at
    return any(w is not upload.complete and (w.acked_at is None or w.acked_at > sent)
               and w.sha256 == holder.sha256 for w in log.writes_to(upload.key))


# --------------------------------------------------------------------------------------------------
# Cleanup between cycles: finish or abort what survived, so each cycle starts with no uploads
# --------------------------------------------------------------------------------------------------

def settle_uploads(run: Run, s3, rng: random.Random, survivors: list, problems: list):
    known = {u.upload_id for u in survivors}
    for upload in survivors:
        numbers = sorted(upload.parts_acked)
        prefix = [n for i, n in enumerate(numbers, start=1) if n == i]
        if prefix and rng.random() < 0.5:
            complete_survivor(run, s3, upload, prefix, problems)
        else:
            s3.abort_multipart_upload(Bucket=BUCKET, Key=upload.key, UploadId=upload.upload_id)
    for key, upload_id in listed_uploads(s3):
        if upload_id not in known:
            s3.abort_multipart_upload(Bucket=BUCKET, Key=key, UploadId=upload_id)
    left = listed_uploads(s3)
    if left:
        problems.append(f"uploads still listed after completing or aborting all: {left}")


def complete_survivor(run: Run, s3, upload: Upload, numbers: list, problems: list):
    """Completes a crash survivor from its acknowledged parts and reads it back."""
    size_full = max(size for _, size in run.versions[upload.version])
    data = content(run.seed, upload.key, upload.version, size_full)
    size_bytes = sum(upload.parts_acked[n][0] for n in numbers)
    expected = s3util.sha256_hex(data[:size_bytes])
    parts = [{"PartNumber": n, "ETag": upload.parts_acked[n][1]} for n in numbers]
    s3.complete_multipart_upload(Bucket=BUCKET, Key=upload.key, UploadId=upload.upload_id,
                                 MultipartUpload={"Parts": parts})
    response = s3.get_object(Bucket=BUCKET, Key=upload.key)
    digest, got_bytes = s3util.stream_sha256_hex(response["Body"])
    if (digest, got_bytes) != (expected, size_bytes):
        problems.append(f"{upload.version}: completed after the crash from parts {numbers}; read "
                        f"back sha256 {digest} ({got_bytes} B), expected {expected} "
                        f"({size_bytes} B)")
    run.remember(upload.version, expected, size_bytes)
    run.state[upload.key] = KeyState(upload.version, expected, size_bytes)


# --------------------------------------------------------------------------------------------------
# One cycle
# --------------------------------------------------------------------------------------------------

@dataclass
class CycleResult:
    acked: int
    in_flight: int
    reads_checked: int
    recovery_s: float
    keys_verified: int
    problems: list
    uploads_survived: int = 0
    requests_cut: int = 0
    cut_reads: list = field(default_factory=list)


def run_cycle(run: Run, server, cycle: int) -> CycleResult:
    options = run.options
    log = CycleLog()
    stop = threading.Event()
    killed_at: list = []
    clients = [Client(run, log, conftest.make_client(server), cycle, index, stop, killed_at)
               for index in range(options.threads)]
    delay_s = random.Random(f"{run.seed}:{cycle}:kill").uniform(options.min_delay_s,
                                                                options.max_delay_s)
    for client in clients:
        client.start()
    stop.wait(delay_s)  # the load runs for the seeded delay; nothing else sets `stop` before it
    killed_at.append(time.monotonic())
    server.kill()  # before `stop`, so that the requests in progress are cut, not finished
    log.dead_at = time.monotonic()  # the process is reaped: nothing sent after this can commit
    stop.set()
    for client in clients:
        client.join(THREAD_JOIN_TIMEOUT_S)
        if client.is_alive():
            raise RuntimeError(f"{client.name} still running {THREAD_JOIN_TIMEOUT_S} s after kill")

    started = time.monotonic()
    try:
        server.start(ready_timeout_s=options.max_recovery_seconds + 30)
    except AssertionError as error:
        return CycleResult(log.acked, 0, log.reads_checked, time.monotonic() - started, 0,
                           [f"restart failed: {error}"], 0, log.requests_cut, log.cut_reads)
    recovery_s = time.monotonic() - started

    problems = list(log.violations)
    if recovery_s > options.max_recovery_seconds:
        problems.append(f"recovery took {recovery_s:.2f} s > {options.max_recovery_seconds} s")
    s3 = conftest.make_client(server)
    found = {}
    for key in run.keys:
        try:
            found[key] = read_key(s3, key, problems)
        except Exception as error:  # noqa: BLE001 - a short or cut body is a finding, not a crash
            problems.append(f"{key}: reading it after recovery failed: {error!r}")
            found[key] = Found()
            continue
        verify_key(run, key, found[key], log.writes_to(key), problems)
    listed = listed_objects(s3)
    present = {k: (f.size_bytes, f.etag) for k, f in found.items() if f.sha256 is not None}
    if listed != present:
        diff = sorted(set(listed.items()) ^ set(present.items()))
        problems.append(f"ListObjectsV2 disagrees with HEAD/GET: symmetric difference {diff}")
    survivors = verify_uploads(s3, log, found, problems)
    for key, f in found.items():
        run.state[key] = KeyState(f.version, f.sha256, f.size_bytes)
    if not problems:
        settle_uploads(run, s3, random.Random(f"{run.seed}:{cycle}:settle"), survivors, problems)
    in_flight = sum(1 for w in log.writes if w.acked_at is None and w.sent_at < log.dead_at)
    return CycleResult(log.acked, in_flight, log.reads_checked, recovery_s, len(run.keys), problems,
                       len(survivors), log.requests_cut, log.cut_reads)


# --------------------------------------------------------------------------------------------------
# Main
# --------------------------------------------------------------------------------------------------

def parse_options(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cycles", type=int, default=50)
    parser.add_argument("--seed", type=int, default=None, help="default: random (printed)")
    parser.add_argument("--max-recovery-seconds", type=float, default=30.0)
    parser.add_argument("--keep", action="store_true", help="keep the data directory on failure")
    parser.add_argument("--threads", type=int, default=6)
    parser.add_argument("--keys", type=int, default=40)
    parser.add_argument("--max-put-bytes", type=int, default=12 * MiB)
    parser.add_argument("--max-parts", type=int, default=4, help="multipart: 2 to this many parts")
    parser.add_argument("--min-delay-s", type=float, default=0.2)
    parser.add_argument("--max-delay-s", type=float, default=3.0)
    parser.add_argument("--cores", type=int, default=2, help="fjord serve --cores")
    parser.add_argument("--lenient-reads", action="store_true",
                        help="report, but do not fail on, a GET cut short during the load")
    options = parser.parse_args(argv)
    if options.seed is None:
        options.seed = random.SystemRandom().randrange(2**32)
    assert options.cycles >= 1 and options.threads >= 1 and options.keys >= 1
    assert options.max_parts >= 2 and 0 <= options.min_delay_s <= options.max_delay_s
    return options


def main(argv=None) -> int:
    options = parse_options(argv)
    check_allowed_states()
    work_dir = Path(tempfile.mkdtemp(prefix="fjord-crash-"))
    print(f"crash test: seed={options.seed} cycles={options.cycles} threads={options.threads} "
          f"keys={options.keys} max_put_bytes={options.max_put_bytes} dir={work_dir}", flush=True)
    print(f"replay: .venv/bin/python tests/crash/crash_test.py --seed {options.seed} "
          f"--cycles {options.cycles} --max-put-bytes {options.max_put_bytes} "
          f"--max-parts {options.max_parts} --threads {options.threads} --keys {options.keys}",
          flush=True)
    run = Run(options)
    server = conftest.FjordServer(work_dir, cores=options.cores, name="fjord-crash")
    server.start()
    conftest.make_client(server).create_bucket(Bucket=BUCKET)
    results = []
    failed = False
    try:
        for cycle in range(options.cycles):
            try:
                result = run_cycle(run, server, cycle)
            except Exception:  # noqa: BLE001 - reported with the seed and cycle like a violation
                result = CycleResult(0, 0, 0, 0.0, 0, [traceback.format_exc()])
            results.append(result)
            print(f"cycle {cycle:3d}: acked {result.acked:4d}, requests cut {result.requests_cut}, "
                  f"writes in flight {result.in_flight}, "
                  f"reads checked {result.reads_checked:3d}, uploads survived "
                  f"{result.uploads_survived}, recovery {result.recovery_s:.2f} s"
                  + (f", {len(result.problems)} VIOLATIONS" if result.problems else ""),
                  flush=True)
            for text in result.cut_reads:
                print(f"  known server bug (cycle {cycle}): {text}", flush=True)
            if result.problems:
                failed = True
                print(f"FAILED: seed={options.seed} cycle={cycle}", flush=True)
                for problem in result.problems:
                    print(f"  - {problem}", flush=True)
                print(f"server log tail:\n{server.log_tail()}", flush=True)
                break
    finally:
        server.kill()
    recoveries = [r.recovery_s for r in results]
    print(f"summary: seed={options.seed} cycles={len(results)} "
          f"acknowledged_ops={sum(r.acked for r in results)} "
          f"requests_cut_by_kill={sum(r.requests_cut for r in results)} "
          f"writes_in_flight_at_kill={sum(r.in_flight for r in results)} "
          f"reads_checked_during_load={sum(r.reads_checked for r in results)} "
          f"keys_verified={sum(r.keys_verified for r in results)} "
          f"uploads_survived={sum(r.uploads_survived for r in results)} "
          f"gets_cut_short_during_load={sum(len(r.cut_reads) for r in results)} "
          f"recovery_s_max={max(recoveries):.2f} "
          f"recovery_s_mean={sum(recoveries) / len(recoveries):.2f} "
          f"result={'FAIL' if failed else 'PASS'}", flush=True)
    if failed and options.keep:
        print(f"data kept in {work_dir} (server log: {server.log_path})")
    else:
        shutil.rmtree(work_dir, ignore_errors=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
