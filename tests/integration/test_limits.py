"""Limits and hostile clients: each limit answers with the error a client expects, and the server stays up.

Servers here are private (their own flags), so their limits can be small enough to reach quickly.
"""

import os
import resource
import socket
import time

import pytest
import requests

import s3util
from conftest import FjordServer, make_client


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
