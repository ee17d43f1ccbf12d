"""The native client (src/client) end to end, through `fjord client` (one request or transfer per run,
a JSON line with its outcome and request counters), the C ABI test program and `fjord bench
checkpoint`, against the real server.

Multipart uploads and ranged downloads are checked byte for byte; the retry logic runs through a small
fault-injecting proxy (FaultProxy below) that answers the first connections with a 503 or resets them
and forwards everything else to the server untouched."""

from __future__ import annotations

import json
import os
import socket
import struct
import subprocess
import threading
from collections import deque
from pathlib import Path

import pytest

from conftest import REPO_ROOT, binary_path
from s3util import MiB

CLIENT_TIMEOUT_S = 120
PART = 5 * MiB


def client_env(server, secret_key: str | None = None) -> dict:
    env = dict(os.environ)
    env.update({"FJORD_ACCESS_KEY": server.access_key,
                "FJORD_SECRET_KEY": secret_key if secret_key is not None else server.secret_key})
    return env


def fjord_client(server, op: str, *args, endpoint: str | None = None, secret_key: str | None = None,
                 expect_ok: bool = True) -> dict:
    argv = [str(binary_path()), "client", op, "--endpoint", endpoint or server.endpoint] + [str(a) for a in args]
    result = subprocess.run(argv, env=client_env(server, secret_key), capture_output=True, text=True,
                            timeout=CLIENT_TIMEOUT_S, stdin=subprocess.DEVNULL)
    assert result.returncode in (0, 1), f"{' '.join(argv)}: exit {result.returncode}\n{result.stderr}"
    outcome = json.loads(result.stdout.strip().splitlines()[-1])
    assert outcome["ok"] == expect_ok, f"{' '.join(argv)}: {outcome}"
    assert (result.returncode == 0) == outcome["ok"]
    return outcome


def crc32c(data: bytes) -> int:
    """Bitwise CRC32C (Castagnoli), reflected; only used on small inputs here."""
    crc = 0xFFFFFFFF
    table = _crc32c_table()
    for b in data:
        crc = table[(crc ^ b) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF


_TABLE: list[int] = []


def _crc32c_table() -> list[int]:
    if not _TABLE:
        for i in range(256):
            c = i
            for _ in range(8):
                c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
            _TABLE.append(c)
    return _TABLE


# ---------------------------------------------------------------------------------------------------
# Fault injection
# ---------------------------------------------------------------------------------------------------

class FaultProxy:
    """A TCP proxy in front of the server. The first len(faults) connections each get one fault for
    their first request: "503" (a SlowDown error document after reading the request, then close),
    "500" (InternalError), "400" (a client error, which must not be retried), "reset" (read the
    request head, then close with SO_LINGER 0, which sends a TCP RST), or "corrupt" (forward, with one
    bit of the body flipped). Later connections are piped to
    the server unchanged. `always` applies the first fault to every connection; the first `skip`
    connections are forwarded before any fault."""

    def __init__(self, target_port: int, faults: list[str], always: bool = False, skip: int = 0):
        self.target_port = target_port
        self.skip = skip
        self.faults = deque(faults)
        self.always = always
        self.injected: list[str] = []
        self.lock = threading.Lock()
        self.listener = socket.socket()
        self.listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(64)
        self.port = self.listener.getsockname()[1]
        self.closed = False
        threading.Thread(target=self._accept_loop, daemon=True).start()

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def close(self):
        self.closed = True
        self.listener.close()

    def _accept_loop(self):
        while not self.closed:
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return
            threading.Thread(target=self._handle, args=(conn,), daemon=True).start()

    def _next_fault(self):
        with self.lock:
            if self.skip > 0:
                self.skip -= 1
                return None
            if self.always and self.faults:
                fault = self.faults[0]
            else:
                fault = self.faults.popleft() if self.faults else None
            if fault:
                self.injected.append(fault)
            return fault

    def _handle(self, conn: socket.socket):
        fault = self._next_fault()
        try:
            if fault is None:
                self._pipe(conn)
            elif fault == "corrupt":
                self._pipe(conn, corrupt=True)
            else:
                self._inject(conn, fault)
        except OSError:
            conn.close()

    def _inject(self, conn: socket.socket, fault: str):
        data = b""
        while b"\r\n\r\n" not in data:
            chunk = conn.recv(65536)
            if not chunk:
                conn.close()
                return
            data += chunk
        if fault == "reset":
            conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            conn.close()
            return
        head, _, rest = data.partition(b"\r\n\r\n")
        length = 0
        for line in head.split(b"\r\n")[1:]:
            name, _, value = line.partition(b":")
            if name.strip().lower() == b"content-length":
                length = int(value.strip())
        remaining = length - len(rest)
        while remaining > 0:  # read the whole body, so the client sees the response and not a reset
            chunk = conn.recv(min(remaining, 1 << 20))
            if not chunk:
                break
            remaining -= len(chunk)
        code, reason, s3_code = {"503": (503, "Slow Down", "SlowDown"),
                                 "500": (500, "Internal Server Error", "InternalError"),
                                 "400": (400, "Bad Request", "InvalidArgument")}[fault]
        body = (f"<?xml version=\"1.0\" encoding=\"UTF-8\"?><Error><Code>{s3_code}</Code>"
                f"<Message>injected by the test proxy</Message></Error>").encode()
        conn.sendall(f"HTTP/1.1 {code} {reason}\r\nContent-Type: application/xml\r\nContent-Length: {len(body)}\r\n"
                     f"Connection: close\r\n\r\n".encode() + body)
        conn.close()

    def _pipe(self, conn: socket.socket, corrupt: bool = False):
        upstream = socket.create_connection(("127.0.0.1", self.target_port))
        if corrupt:  # flip one bit of the first request's body, 1000 bytes in
            data = b""
            while b"\r\n\r\n" not in data or len(data) < data.index(b"\r\n\r\n") + 1100:
                chunk = conn.recv(65536)
                if not chunk:
                    break
                data += chunk
            at = data.index(b"\r\n\r\n") + 4 + 1000
            upstream.sendall(data[:at] + bytes([data[at] ^ 0x01]) + data[at + 1:])

        def copy(src, dst):
            try:
                while True:
                    chunk = src.recv(1 << 20)
                    if not chunk:
                        break
                    dst.sendall(chunk)
            except OSError:
                pass
            finally:
                try:
                    dst.shutdown(socket.SHUT_WR)
                except OSError:
                    pass

        t = threading.Thread(target=copy, args=(upstream, conn), daemon=True)
        t.start()
        copy(conn, upstream)
        t.join()
        conn.close()
        upstream.close()


@pytest.fixture
def proxy_factory(fjord_server):
    proxies = []

    def make(faults, always=False, skip=0):
        proxy = FaultProxy(fjord_server.port, list(faults), always, skip)
        proxies.append(proxy)
        return proxy

    yield make
    for proxy in proxies:
        proxy.close()


# ---------------------------------------------------------------------------------------------------
# Multipart and ranged transfers, byte-exact
# ---------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("size", [1, 5 * MiB + 1, 37 * MiB], ids=["1B", "5MiB+1", "37MiB"])
@pytest.mark.parametrize("trailer", [False, True], ids=["unsigned", "crc32c-trailer"])
def test_multipart_upload_and_ranged_download_are_byte_exact(fjord_server, s3, bucket, tmp_dir, rng, size, trailer):
    data = rng.randbytes(size)
    source = tmp_dir / "source"
    source.write_bytes(data)
    extra = ["--trailer"] if trailer else []
    put = fjord_client(fjord_server, "put", "--bucket", bucket, "--key", "obj", "--file", source, "--multipart",
                       "--part-size", PART, "--in-flight", 3, *extra)
    parts = max(1, -(-size // PART))
    assert put["etag"].endswith(f"-{parts}"), put
    assert put["requests"] == parts + 2 and put["retries"] == 0  # create + parts + complete
    if size <= 4096:  # the client's CRC32C (ISA-L) against an independent one
        assert put["crc32c"] == crc32c(data)

    # Read back with boto3 (an independent client) and with the native client in parallel ranges.
    assert s3.get_object(Bucket=bucket, Key="obj")["Body"].read() == data
    target = tmp_dir / "target"
    got = fjord_client(fjord_server, "get", "--bucket", bucket, "--key", "obj", "--file", target,
                       "--range-size", PART, "--in-flight", 3)
    assert got["bytes"] == size and target.read_bytes() == data
    assert got["crc32c"] == put["crc32c"]
    assert got["requests"] == 1 + max(1, -(-size // PART))  # HEAD + one GET per range

    # A range across a part boundary, in 128-byte ranges; for 5 MiB + 1 it runs past the object's end
    # and comes back short.
    if size > PART:
        offset, length = PART - 100, 300
        mid = fjord_client(fjord_server, "get", "--bucket", bucket, "--key", "obj", "--file", target,
                           "--offset", offset, "--length", length, "--range-size", 128)
        assert target.read_bytes() == data[offset:offset + length]
        assert mid["bytes"] == len(data[offset:offset + length])


def test_single_put_with_crc32c_trailer_round_trips(fjord_server, s3, bucket, tmp_dir, rng):
    data = rng.randbytes(3 * MiB + 17)
    (tmp_dir / "f").write_bytes(data)
    fjord_client(fjord_server, "put", "--bucket", bucket, "--key", "t", "--file", tmp_dir / "f", "--trailer")
    assert s3.get_object(Bucket=bucket, Key="t")["Body"].read() == data
    head = fjord_client(fjord_server, "head", "--bucket", bucket, "--key", "t")
    assert head["bytes"] == len(data)
    fjord_client(fjord_server, "delete", "--bucket", bucket, "--key", "t")
    fjord_client(fjord_server, "head", "--bucket", bucket, "--key", "t", expect_ok=False)


def test_crc32c_trailer_catches_corruption_in_transit(fjord_server, s3, bucket, tmp_dir, rng, proxy_factory):
    data = rng.randbytes(64 * 1024)
    (tmp_dir / "f").write_bytes(data)
    # With the trailer, the server checks the CRC32C and refuses the body (a 4xx: not retried).
    proxy = proxy_factory(["corrupt"])
    out = fjord_client(fjord_server, "put", "--bucket", bucket, "--key", "guarded", "--file", tmp_dir / "f",
                       "--endpoint", proxy.endpoint, "--trailer", expect_ok=False)
    assert out["error"].startswith("HTTP 400 BadDigest") and "CRC32C" in out["error"], out
    assert out["attempts"] == 1
    assert "Contents" not in s3.list_objects_v2(Bucket=bucket)
    # Without it (UNSIGNED-PAYLOAD) nothing can notice: the flipped bit is stored. This is what the
    # trailer is for.
    proxy = proxy_factory(["corrupt"])
    fjord_client(fjord_server, "put", "--bucket", bucket, "--key", "unguarded", "--file", tmp_dir / "f",
                 "--endpoint", proxy.endpoint)
    stored = s3.get_object(Bucket=bucket, Key="unguarded")["Body"].read()
    assert len(stored) == len(data) and stored != data


def test_multipart_part_below_minimum_fails_and_aborts(fjord_server, s3, bucket, tmp_dir, rng):
    (tmp_dir / "f").write_bytes(rng.randbytes(3 * MiB))
    out = fjord_client(fjord_server, "put", "--bucket", bucket, "--key", "small-parts", "--file", tmp_dir / "f",
                       "--multipart", "--part-size", MiB, expect_ok=False)
    assert "EntityTooSmall" in out["error"] and out["retries"] == 0
    assert s3.list_multipart_uploads(Bucket=bucket).get("Uploads", []) == []  # aborted
    assert "Contents" not in s3.list_objects_v2(Bucket=bucket)


def test_connections_are_reused(fjord_server, bucket, tmp_dir, rng):
    (tmp_dir / "f").write_bytes(rng.randbytes(26 * MiB))
    put = fjord_client(fjord_server, "put", "--bucket", bucket, "--key", "r", "--file", tmp_dir / "f", "--multipart",
                       "--part-size", PART, "--in-flight", 2, "--connections", 2)
    assert put["connections"] == 2  # the pool is bounded
    assert put["connections_reused"] >= put["requests"] - 2


# ---------------------------------------------------------------------------------------------------
# Retries
# ---------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("fault", ["503", "500", "reset"])
def test_retryable_failures_are_retried(fjord_server, s3, bucket, tmp_dir, rng, proxy_factory, fault):
    proxy = proxy_factory([fault, fault])
    data = rng.randbytes(256 * 1024)
    (tmp_dir / "f").write_bytes(data)
    put = fjord_client(fjord_server, "put", "--bucket", bucket, "--key", "k", "--file", tmp_dir / "f",
                       "--endpoint", proxy.endpoint, "--backoff-ms", 10, "--seed", 7)
    assert proxy.injected == [fault, fault]
    assert (put["requests"], put["attempts"], put["retries"]) == (1, 3, 2)
    assert s3.get_object(Bucket=bucket, Key="k")["Body"].read() == data


def test_multipart_survives_faults_on_parts(fjord_server, s3, bucket, tmp_dir, rng, proxy_factory):
    # The first connection (CreateMultipartUpload, then a part) is clean; the next ones, opened for
    # the parts in flight, fail.
    proxy = proxy_factory(["503", "reset", "503", "reset"], skip=1)
    data = rng.randbytes(3 * PART + 123)
    (tmp_dir / "f").write_bytes(data)
    put = fjord_client(fjord_server, "put", "--bucket", bucket, "--key", "mp", "--file", tmp_dir / "f",
                       "--endpoint", proxy.endpoint, "--multipart", "--part-size", PART, "--in-flight", 3,
                       "--backoff-ms", 10, "--attempts", 6, "--trailer")
    # How many new connections the parts open (each takes a fault) depends on timing; each fault
    # costs exactly one retry.
    assert len(proxy.injected) >= 1 and put["retries"] == len(proxy.injected)
    assert put["requests"] == 1 + 4 + 1 and put["attempts"] == 6 + put["retries"]
    assert s3.get_object(Bucket=bucket, Key="mp")["Body"].read() == data
    proxy2 = proxy_factory(["reset", "503"])
    got = fjord_client(fjord_server, "get", "--bucket", bucket, "--key", "mp", "--file", tmp_dir / "out",
                       "--endpoint", proxy2.endpoint, "--range-size", PART, "--in-flight", 2, "--backoff-ms", 10,
                       "--attempts", 6)
    assert got["retries"] == 2 and (tmp_dir / "out").read_bytes() == data


def test_client_errors_are_not_retried(fjord_server, bucket, tmp_dir, proxy_factory):
    (tmp_dir / "f").write_bytes(b"x" * 1000)
    proxy = proxy_factory(["400", "400"])
    out = fjord_client(fjord_server, "put", "--bucket", bucket, "--key", "k", "--file", tmp_dir / "f",
                       "--endpoint", proxy.endpoint, expect_ok=False)
    assert proxy.injected == ["400"] and (out["attempts"], out["retries"]) == (1, 0)
    # A real 4xx from the server: a wrong secret is refused once, not retried.
    denied = fjord_client(fjord_server, "put", "--bucket", bucket, "--key", "k", "--file", tmp_dir / "f",
                          secret_key="wrong-secret", expect_ok=False)
    assert "SignatureDoesNotMatch" in denied["error"] and denied["attempts"] == 1


def test_gives_up_after_max_attempts(fjord_server, bucket, tmp_dir, proxy_factory):
    (tmp_dir / "f").write_bytes(b"y" * 1000)
    proxy = proxy_factory(["503"], always=True)
    out = fjord_client(fjord_server, "put", "--bucket", bucket, "--key", "k", "--file", tmp_dir / "f",
                       "--endpoint", proxy.endpoint, "--attempts", 3, "--backoff-ms", 5, expect_ok=False)
    assert (out["attempts"], out["retries"], out["gave_up"]) == (3, 2, 1)
    assert "SlowDown" in out["error"] and "gave up after 3 attempts" in out["error"]
    assert len(proxy.injected) == 3


def test_deadline_bounds_the_retries(fjord_server, bucket, tmp_dir, proxy_factory):
    (tmp_dir / "f").write_bytes(b"z" * 1000)
    proxy = proxy_factory(["503"], always=True)
    out = fjord_client(fjord_server, "put", "--bucket", bucket, "--key", "k", "--file", tmp_dir / "f",
                       "--endpoint", proxy.endpoint, "--attempts", 100, "--backoff-ms", 100,
                       "--deadline-ms", 700, expect_ok=False)
    # Waits of at least 50, 100, 200, 400 ms (half the doubling cap each) exceed 700 ms within 5 attempts.
    assert 2 <= out["attempts"] <= 5 and out["gave_up"] == 1, out


def test_connection_refused_is_retried_then_reported(fjord_server, bucket, tmp_dir):
    with socket.socket() as s:  # a port with no listener
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    (tmp_dir / "f").write_bytes(b"r")
    out = fjord_client(fjord_server, "put", "--bucket", bucket, "--key", "k", "--file", tmp_dir / "f",
                       "--endpoint", f"http://127.0.0.1:{port}", "--attempts", 3, "--backoff-ms", 5, expect_ok=False)
    assert (out["attempts"], out["retries"]) == (3, 2) and "refused" in out["error"].lower()


# ---------------------------------------------------------------------------------------------------
# C ABI and the checkpoint benchmark
# ---------------------------------------------------------------------------------------------------

def c_abi_binary() -> Path:
    configured = os.environ.get("FJORD_C_ABI_TEST")
    path = Path(configured) if configured else REPO_ROOT / "build" / "release" / "tests" / "unit" / "c_abi_test"
    if not path.exists():
        pytest.fail(f"{path} not found (ninja -C build/release c_abi_test)", pytrace=False)
    return path


@pytest.mark.parametrize("trailer", ["0", "1"], ids=["unsigned", "crc32c-trailer"])
def test_c_abi_program(fjord_server, s3, bucket, trailer):
    env = dict(os.environ)
    env.update({"FJORD_TEST_ENDPOINT": fjord_server.endpoint, "FJORD_TEST_ACCESS_KEY": fjord_server.access_key,
                "FJORD_TEST_SECRET_KEY": fjord_server.secret_key, "FJORD_TEST_BUCKET": bucket,
                "FJORD_TEST_TRAILER": trailer})
    result = subprocess.run([str(c_abi_binary())], env=env, capture_output=True, text=True, timeout=CLIENT_TIMEOUT_S)
    assert result.returncode == 0, f"exit {result.returncode}\n{result.stdout}\n{result.stderr}"
    assert "all checks passed" in result.stdout


def test_c_abi_program_skips_without_endpoint():
    env = {k: v for k, v in os.environ.items() if k != "FJORD_TEST_ENDPOINT"}
    result = subprocess.run([str(c_abi_binary())], env=env, capture_output=True, text=True, timeout=30)
    assert result.returncode == 77 and "SKIP" in result.stdout


def test_bench_checkpoint_small(fjord_server, s3, bucket, tmp_dir):
    out = tmp_dir / "checkpoint.json"
    argv = [str(binary_path()), "bench", "checkpoint", "--endpoint", fjord_server.endpoint, "--bucket", bucket,
            "--scale", "1/512", "--ranks", 3, "--checkpoints", 2, "--compute-seconds", 0, "--verify-every", 1,
            "--json", out]
    result = subprocess.run([str(a) for a in argv], env=client_env(fjord_server), capture_output=True, text=True,
                            timeout=CLIENT_TIMEOUT_S)
    assert result.returncode == 0, result.stdout + result.stderr
    r = json.loads(out.read_text())
    assert (r["model_bytes"], r["optim_bytes"]) == (2_007_565_312 // 512, 12_045_637_632 // 512)
    assert r["checkpoint_bytes"] == 3 * (r["model_bytes"] + r["optim_bytes"])
    assert r["errors"] == 0 and r["verify_failures"] == 0 and r["verified_files"] == 2 * 3 * 2
    for phase in ("write", "read"):
        assert len(r[phase]["checkpoints"]) == 2 and r[phase]["mean_gib_s"] > 0
        for c in r[phase]["checkpoints"]:
            assert 0 < c["rank0_s"] <= c["slowest_s"]
    assert "MLPerf-style summary" in result.stdout
    assert "Contents" not in s3.list_objects_v2(Bucket=bucket)  # cleaned up (no --keep)
