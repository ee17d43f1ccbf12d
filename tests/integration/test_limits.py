"""Limits and hostile clients: each limit answers with the error a client expects, and the server stays up.

Servers here are private (their own flags), so their limits can be small enough to reach quickly.
"""

import os
import resource
import socket
import time

import boto3
import pytest
import requests
from botocore.config import Config

import s3util
from conftest import REGION, FjordServer, make_client, server_metric


def _rss_kib(pid: int) -> int:
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise AssertionError("no VmRSS")


def _status_line(sock: socket.socket, deadline_s: float = 5.0) -> bytes:
    sock.settimeout(deadline_s)
    data = b""
    while b"\r\n" not in data:
        chunk = sock.recv(4096)
        if not chunk:
            break
        data += chunk
    return data.split(b"\r\n", 1)[0]


@pytest.fixture
def limited_server(tmp_dir):
    server = FjordServer(tmp_dir / "limited", cores=1,
                         extra_args=["--max-connections", "8", "--header-timeout-ms", "700",
                                     "--idle-timeout-ms", "5000"])
    server.start()
    yield server
    server.stop()


def test_connections_over_the_limit_get_503_and_the_server_recovers(limited_server):
    held = [socket.create_connection(("127.0.0.1", limited_server.port)) for _ in range(8)]
    try:
        extra = socket.create_connection(("127.0.0.1", limited_server.port))
        assert _status_line(extra).startswith(b"HTTP/1.1 503")
        extra.close()
    finally:
        for s in held:
            s.close()
    # Once the held connections are gone, requests are served again.
    s3util.wait_until(lambda: requests.get(f"{limited_server.endpoint}/health/ready", timeout=2).status_code == 200,
                      timeout_s=10)


def test_slowloris_head_is_cut_at_the_header_deadline(limited_server):
    sock = socket.create_connection(("127.0.0.1", limited_server.port))
    sock.settimeout(5)
    started = time.monotonic()
    closed = False
    # One byte every 100 ms would take far longer than the 700 ms head deadline.
    for byte in b"GET /health/ready HTTP/1.1\r\nHost: x\r\nX-Slow: " + b"a" * 200:
        try:
            sock.send(bytes([byte]))
        except OSError:
            closed = True
            break
        time.sleep(0.1)
        if time.monotonic() - started > 4:
            break
    if not closed:
        assert sock.recv(4096) == b"", "the server kept a byte-per-100ms head open past its deadline"
    assert time.monotonic() - started < 4
    sock.close()
    assert requests.get(f"{limited_server.endpoint}/health/live", timeout=2).status_code == 200


def test_two_thousand_idle_connections_with_bounded_memory(tmp_dir):
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard < 2200:
        pytest.skip(f"the descriptor limit ({hard}) is below 2,200")
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, 2200), hard))
    server = FjordServer(tmp_dir / "idle", cores=2)
    server.start()
    sockets = []
    try:
        before = _rss_kib(server.process.pid)
        for _ in range(2000):
            sockets.append(socket.create_connection(("127.0.0.1", server.port)))
        # Every connection is accepted and the server still answers.
        s3util.wait_until(lambda: requests.get(f"{server.endpoint}/health/ready", timeout=5).status_code == 200,
                          timeout_s=20)
        s3 = make_client(server)
        s3.create_bucket(Bucket="idle")
        s3.put_object(Bucket="idle", Key="k", Body=b"still serving")
        assert s3.get_object(Bucket="idle", Key="k")["Body"].read() == b"still serving"
        grown_kib = _rss_kib(server.process.pid) - before
        assert grown_kib < 64 * 1024, f"2,000 idle connections grew the server by {grown_kib} KiB"
    finally:
        for s in sockets:
            s.close()
        server.stop()
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def test_size_limits_answer_s3_errors(fjord_server):
    host = fjord_server.host
    s3 = make_client(fjord_server)
    s3.create_bucket(Bucket="limits-bucket")
    # A request target longer than 16 KiB.
    long_path = "/limits-bucket/" + "k" * 20000
    sock = socket.create_connection(("127.0.0.1", fjord_server.port))
    sock.sendall(f"GET {long_path} HTTP/1.1\r\nHost: {host}\r\n\r\n".encode())
    assert _status_line(sock).split()[1] in (b"400", b"414")
    sock.close()
    # A single PUT over 5 GiB is refused from its headers, before any body byte.
    creds = fjord_server.credentials
    signed = s3util.sign_headers(creds, "PUT", host, "/limits-bucket/huge")
    sock = socket.create_connection(("127.0.0.1", fjord_server.port))
    head = ("PUT /limits-bucket/huge HTTP/1.1\r\n" + "".join(f"{k}: {v}\r\n" for k, v in signed.headers.items())
            + f"content-length: {6 * 1024**3}\r\n\r\n")
    sock.sendall(head.encode())
    sock.settimeout(5)
    response = sock.recv(65536)
    assert response.startswith(b"HTTP/1.1 400") and b"EntityTooLarge" in response
    sock.close()
    # A key over 1,024 bytes.
    with pytest.raises(Exception) as too_long:
        s3.put_object(Bucket="limits-bucket", Key="k" * 1025, Body=b"x")
    assert "KeyTooLongError" in str(too_long.value)


# ---------------------------------------------------------------------------------------------------
# Per-connection request rate
# ---------------------------------------------------------------------------------------------------

RATE_PER_S = 20
BURST = 5


@pytest.fixture
def rate_limited_server(tmp_dir):
    server = FjordServer(tmp_dir / "rate", cores=1,
                         extra_args=["--max-requests-per-second-per-connection", str(RATE_PER_S),
                                     "--request-burst-per-connection", str(BURST)])
    server.start()
    yield server
    server.stop()


def _signed_list_buckets(server) -> bytes:
    signed = s3util.sign_headers(server.credentials, "GET", server.host, "/")
    return ("GET / HTTP/1.1\r\n" + "".join(f"{k}: {v}\r\n" for k, v in signed.headers.items()) + "\r\n").encode()


def _assert_slowdown(response: s3util.RawResponse):
    assert response.status == 503, (response.status, response.body)
    fields = s3util.xml_children(response.body)
    assert fields["Code"] == "SlowDown"
    assert fields["Message"] == "Please reduce your request rate."
    assert "close" not in response.headers.get("connection", "").lower(), "a SlowDown must keep the connection"
    # When the next request would be taken: at most one token interval away.
    assert 1 <= int(response.headers["x-amz-retry-after"]) <= 1000 // RATE_PER_S


def test_requests_over_the_connection_rate_get_slowdown_and_the_connection_recovers(rate_limited_server):
    server = rate_limited_server
    slowdowns_before = server_metric(server, "fjord_slowdown_total")
    with s3util.RawConnection("127.0.0.1", server.port) as conn:
        # Pipelined: every request is on the wire before the first answer, far faster than 20/s.
        conn.send(_signed_list_buckets(server) * (BURST + 15))
        statuses = []
        for _ in range(BURST + 15):
            response = conn.read_response()
            statuses.append(response.status)
            if response.status == 503:
                _assert_slowdown(response)
        assert statuses[:BURST] == [200] * BURST, statuses
        assert statuses.count(503) >= 10, statuses
        assert set(statuses) == {200, 503}, statuses
        # Once a token has refilled (one per 50 ms), the same connection is served again.
        time.sleep(3 / RATE_PER_S)
        conn.send(_signed_list_buckets(server))
        assert conn.read_response().status == 200
    assert server_metric(server, "fjord_slowdown_total") - slowdowns_before == statuses.count(503)


def test_botocore_default_retries_ride_out_slowdown(rate_limited_server):
    """botocore retries 503 by default (legacy mode: up to 4 retries with random exponential backoff), so an
    SDK client sending faster than the limit slows down instead of failing."""
    server = rate_limited_server
    s3 = boto3.session.Session().client(
        "s3", endpoint_url=server.endpoint, region_name=REGION,
        config=Config(s3={"addressing_style": "path"}),  # no `retries`: botocore's defaults
        aws_access_key_id=server.access_key, aws_secret_access_key=server.secret_key)
    s3.create_bucket(Bucket="retried")
    for i in range(2 * RATE_PER_S):  # 80 requests: four seconds' worth at the limit
        s3.put_object(Bucket="retried", Key=f"k{i % 5}", Body=b"x" * 100)
        s3.head_object(Bucket="retried", Key=f"k{i % 5}")
    assert server_metric(server, "fjord_slowdown_total") > 0, "the client never went over the limit"


def test_a_client_below_the_rate_never_sees_slowdown(rate_limited_server):
    server = rate_limited_server
    s3 = make_client(server)  # retries off: a SlowDown would fail the call
    s3.create_bucket(Bucket="steady")
    # Half the limit, paced: a well-behaved client.
    interval_s = 2 / RATE_PER_S
    next_at = time.monotonic()
    for i in range(RATE_PER_S):
        next_at += interval_s
        s3.put_object(Bucket="steady", Key=f"k{i}", Body=b"y")
        time.sleep(max(0.0, next_at - time.monotonic()))
    assert server_metric(server, "fjord_slowdown_total") == 0
