"""Limits and hostile clients: each limit answers with the error a client expects, and the server stays up.

Servers here are private (their own flags), so their limits can be small enough to reach quickly.
"""

import os
import resource
import select
import socket
import time

import boto3
import pytest
import requests
from botocore.config import Config
from botocore.exceptions import ClientError

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


def test_refusals_sent_from_the_accept_loop_do_not_hold_it_up(limited_server):
    # The over-limit 503 is written from the accept loop itself. Clients over the limit that never read
    # (smallest receive buffers) and never close must not keep the loop from taking the connections
    # after them: every one of 64 gets its 503 in turn, and the server serves again once slots free.
    held = [socket.create_connection(("127.0.0.1", limited_server.port)) for _ in range(8)]
    silent = []
    try:
        for _ in range(64):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1)
            s.connect(("127.0.0.1", limited_server.port))
            silent.append(s)
        for s in silent:
            assert _status_line(s).startswith(b"HTTP/1.1 503")
    finally:
        for s in held + silent:
            s.close()
    s3util.wait_until(lambda: requests.get(f"{limited_server.endpoint}/health/ready", timeout=2).status_code == 200,
                      timeout_s=10)


def test_slowloris_head_is_cut_at_the_header_deadline(limited_server):
    sock = socket.create_connection(("127.0.0.1", limited_server.port))
    sock.settimeout(5)
    closed = False
    # One byte every 100 ms: the head (never finished) would take 25 s, far longer than the 700 ms head
    # deadline. The bound is the trickle itself, not a wall-clock limit a loaded machine could miss: the
    # server must have closed the connection by the time the last byte is sent.
    for byte in b"GET /health/ready HTTP/1.1\r\nHost: x\r\nX-Slow: " + b"a" * 200:
        try:
            sock.send(bytes([byte]))
        except OSError:
            closed = True
            break
        if select.select([sock], [], [], 0.1)[0]:  # readable: the server closed (EOF) or answered
            break
    if not closed:
        assert sock.recv(4096) == b"", "the server kept a byte-per-100ms head open past its deadline"
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
    return s3util.raw_request("GET", "/", server.host, signed.headers)


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


# ---------------------------------------------------------------------------------------------------
# Minimum body rate: slow senders and slow readers
# ---------------------------------------------------------------------------------------------------

# Far above a trickle, far below loopback speed: 4 MiB/s on average after the first second.
MIN_RATE_ARGS = ["--min-body-rate-bytes-per-second", str(4 * 1024 * 1024), "--min-body-rate-grace-ms", "1000"]
REQUEST_TIMEOUT_MESSAGE = ("Your socket connection to the server was not read from or written to within the timeout "
                           "period. Idle connections will be closed.")


@pytest.fixture
def rate_floor_server(tmp_dir):
    server = FjordServer(tmp_dir / "floor", cores=1, extra_args=MIN_RATE_ARGS)
    server.start()
    yield server
    server.stop()


def _timeouts(server, direction: str) -> int:
    return server_metric(server, f'fjord_request_timeouts_total{{direction="{direction}"}}')


def test_slow_uploader_gets_request_timeout_and_nothing_is_stored(rate_floor_server):
    server = rate_floor_server
    s3 = make_client(server)
    s3.create_bucket(Bucket="trickle")
    before = _timeouts(server, "receive")
    path = "/trickle/slow"
    signed = s3util.sign_headers(server.credentials, "PUT", server.host, path)
    head = s3util.raw_request("PUT", path, server.host, {**signed.headers, "content-length": "1000000"})
    conn = s3util.RawConnection("127.0.0.1", server.port)
    conn.send(head)
    started = time.monotonic()
    served_meanwhile = False
    sent = 0
    # 100 bytes every 50 ms (2 KB/s) until the server answers, which it must long before the body is
    # complete (500 s at this rate): the bound is the body, not a wall-clock limit.
    while not select.select([conn.sock], [], [], 0.05)[0]:
        assert sent < 1_000_000, "the server let a 2 KB/s upload run to its end"
        sent += 100
        try:
            conn.send(b"s" * 100)
        except (BrokenPipeError, ConnectionResetError):
            break
        if not served_meanwhile:
            # Other clients are served while the trickle holds its connection.
            s3.put_object(Bucket="trickle", Key="fast", Body=b"f" * 200_000)
            assert s3.get_object(Bucket="trickle", Key="fast")["Body"].read() == b"f" * 200_000
            served_meanwhile = True
    response = conn.read_response()
    elapsed_s = time.monotonic() - started
    assert response.status == 400, (response.status, response.body)
    fields = s3util.xml_children(response.body)
    assert fields["Code"] == "RequestTimeout"
    assert fields["Message"] == REQUEST_TIMEOUT_MESSAGE
    assert response.headers.get("connection", "").lower() == "close"
    assert elapsed_s >= 0.9, elapsed_s  # never before the grace period (a loaded machine only adds)
    conn.read_until_close(deadline_s=5)  # EOF, or a reset when our last bytes were still unread
    conn.close()
    assert served_meanwhile
    with pytest.raises(ClientError) as missing:
        s3.head_object(Bucket="trickle", Key="slow")
    assert missing.value.response["ResponseMetadata"]["HTTPStatusCode"] == 404
    assert [o["Key"] for o in s3.list_objects_v2(Bucket="trickle")["Contents"]] == ["fast"]
    assert _timeouts(server, "receive") - before == 1


def test_full_speed_transfers_are_not_affected_by_the_rate_floor(rate_floor_server, rng):
    server = rate_floor_server
    s3 = make_client(server)
    s3.create_bucket(Bucket="fast")
    body = s3util.payload(rng, 24 * 1024 * 1024)
    before = _timeouts(server, "receive") + _timeouts(server, "send")
    s3.put_object(Bucket="fast", Key="big", Body=body)
    assert s3util.sha256_hex(s3.get_object(Bucket="fast", Key="big")["Body"].read()) == s3util.sha256_hex(body)
    # A small request that waits a while between requests is not a slow transfer either.
    time.sleep(1.5)
    assert s3.get_object(Bucket="fast", Key="big", Range="bytes=0-9")["Body"].read() == body[:10]
    assert _timeouts(server, "receive") + _timeouts(server, "send") == before


def test_a_reader_that_stops_reading_is_cut_and_frees_the_server(rate_floor_server):
    server = rate_floor_server
    s3 = make_client(server)
    s3.create_bucket(Bucket="stall")
    size = 32 * 1024 * 1024
    s3.put_object(Bucket="stall", Key="big", Body=b"r" * size)
    before = _timeouts(server, "send")
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 16 * 1024)  # before connect: a small window
    sock.connect(("127.0.0.1", server.port))
    signed = s3util.sign_headers(server.credentials, "GET", server.host, "/stall/big")
    sock.sendall(s3util.raw_request("GET", "/stall/big", server.host, signed.headers))
    assert _status_line(sock).startswith(b"HTTP/1.1 200")
    # Stop reading. The server fills the socket buffers, then falls below 4 MiB/s and must give up.
    s3util.wait_until(lambda: _timeouts(server, "send") > before, timeout_s=15, what="the stalled GET to be cut")
    # Meanwhile and afterwards, other clients are served in full.
    assert len(s3.get_object(Bucket="stall", Key="big")["Body"].read()) == size
    received = 0
    sock.settimeout(10)
    try:
        while chunk := sock.recv(1 << 16):
            received += len(chunk)
    except ConnectionResetError:
        pass
    sock.close()
    assert received < size, "the whole body arrived: the reader was not cut"
    assert _timeouts(server, "send") - before == 1


def test_an_error_answered_before_the_body_is_read_reaches_a_client_still_sending(fjord_server):
    """The server answers EntityTooLarge from the headers and closes while the client is still sending its
    body. Closing outright would make the kernel answer the client's next bytes with a reset, which
    destroys the response before the client reads it; the server lingers (reads and discards) instead."""
    make_client(fjord_server).create_bucket(Bucket="linger-bucket")
    creds = fjord_server.credentials
    host = fjord_server.host
    signed = s3util.sign_headers(creds, "PUT", host, "/linger-bucket/huge")
    sock = socket.create_connection(("127.0.0.1", fjord_server.port))
    head = ("PUT /linger-bucket/huge HTTP/1.1\r\n" + "".join(f"{k}: {v}\r\n" for k, v in signed.headers.items())
            + f"content-length: {6 * 1024**3}\r\n\r\n")
    sock.sendall(head.encode() + b"x" * 65536)
    # The answer has arrived, so the server has decided and is closing; keep sending all the same.
    assert select.select([sock], [], [], 10)[0], "no answer to a PUT declaring 6 GiB"
    try:
        for _ in range(16):
            sock.sendall(b"y" * 65536)
    except (ConnectionResetError, BrokenPipeError) as e:
        pytest.fail(f"the server reset the connection instead of lingering: {e!r}")
    sock.settimeout(5)
    response = b""
    while True:
        chunk = sock.recv(65536)
        if not chunk:
            break
        response += chunk
    assert response.startswith(b"HTTP/1.1 400") and b"EntityTooLarge" in response, response[:200]
    sock.close()
