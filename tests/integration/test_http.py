"""HTTP/1.1 at the socket level: malformed input, limits, keep-alive, 100-continue, pipelining and
clients that vanish. After every abuse the server must still answer."""

import socket
import struct
import threading

import pytest

from botocore.exceptions import ClientError

import s3util
from s3util import KiB, RawConnection, raw_request

READ_DEADLINE_S = 10.0


def connect(server) -> RawConnection:
    return RawConnection("127.0.0.1", server.port, timeout_s=READ_DEADLINE_S)


def signed_request(server, method, path, body=b"", headers=None, payload_hash=None) -> bytes:
    """Raw bytes of a SigV4-signed request (payload hash over `body` unless given)."""
    signed = s3util.sign_headers(server.credentials, method, server.host, path, headers=headers,
                                 payload_hash=payload_hash or s3util.sha256_hex(body))
    all_headers = dict(signed.headers)
    if body or method == "PUT":
        all_headers.setdefault("content-length", str(len(body)))
    return raw_request(method, path, server.host, all_headers, body)


def assert_alive(server):
    s3util.wait_until(server.is_ready, timeout_s=10, what="the server to answer /health/ready")
    assert server.process.poll() is None


def assert_closed_after_response(conn: RawConnection):
    """Nothing more arrives and the server closes the connection."""
    assert conn.read_until_close(deadline_s=READ_DEADLINE_S) == b""


@pytest.mark.parametrize("request_bytes", [
    b"GARBAGE\r\n\r\n",
    b"G@T / HTTP/1.1\r\nHost: x\r\n\r\n",                   # '@' is not a token character
    b"GET /health/ready HTTP/1.1 junk\r\nHost: x\r\n\r\n",  # extra field on the request line
    b"GET /health/ready HTTP/1.1\r\nHost x-no-colon\r\n\r\n",  # header line without ':'
], ids=["garbage", "bad-method", "extra-field", "header-without-colon"])
def test_malformed_request_gets_400_and_close(fjord_server, request_bytes):
    with connect(fjord_server) as conn:
        conn.send(request_bytes)
        response = conn.read_response()
        assert response.status == 400, response
        assert_closed_after_response(conn)
    assert_alive(fjord_server)


@pytest.mark.parametrize("shape", ["many-headers", "one-long-header"])
def test_oversized_header_section_is_refused(fjord_server, shape):
    if shape == "many-headers":
        padding = "".join(f"X-Pad-{i:04d}: {'a' * 1000}\r\n" for i in range(100))
    else:
        padding = f"X-Pad: {'a' * (100 * KiB)}\r\n"
    request = f"GET /health/ready HTTP/1.1\r\nHost: {fjord_server.host}\r\n{padding}\r\n".encode()
    with connect(fjord_server) as conn:
        try:
            conn.send(request)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the server may stop reading at its limit; its answer should still be readable
        response = conn.read_response()
        assert 400 <= response.status < 500, response
    assert_alive(fjord_server)


def test_keep_alive_serves_several_requests_on_one_connection(fjord_server, s3, bucket, rng):
    data = s3util.payload(rng, 5000)
    path = s3util.object_path(bucket, "kept-alive")
    with connect(fjord_server) as conn:
        conn.send(signed_request(fjord_server, "PUT", path, data))
        assert conn.read_response().status == 200
        conn.send(signed_request(fjord_server, "HEAD", path))
        head = conn.read_response(head_request=True)
        assert head.status == 200 and head.headers["content-length"] == "5000"
        # If HEAD had sent a body, this response would be read out of those bytes and fail.
        conn.send(signed_request(fjord_server, "GET", path))
        got = conn.read_response()
        assert got.status == 200 and got.body == data
        conn.send(raw_request("GET", "/health/live", fjord_server.host, {}))
        assert conn.read_response().status == 200
        conn.send(signed_request(fjord_server, "GET", s3util.object_path(bucket, "missing")))
        missing = conn.read_response()
        assert missing.status == 404
        assert s3util.xml_children(missing.body)["Code"] == "NoSuchKey"
        conn.send(signed_request(fjord_server, "GET", path))
        assert conn.read_response().body == data  # still usable after an error response


def test_connection_close_is_honoured(fjord_server):
    with connect(fjord_server) as conn:
        conn.send(raw_request("GET", "/health/ready", fjord_server.host, {"Connection": "close"}))
        assert conn.read_response().status == 200
        assert_closed_after_response(conn)


def test_expect_100_continue(fjord_server, s3, bucket, rng):
    data = s3util.payload(rng, 256 * KiB)
    path = s3util.object_path(bucket, "expect")
    head = s3util.sign_headers(fjord_server.credentials, "PUT", fjord_server.host, path,
                               headers={"content-length": str(len(data))},
                               payload_hash=s3util.UNSIGNED_PAYLOAD)
    headers = dict(head.headers, expect="100-continue")
    with connect(fjord_server) as conn:
        conn.send(raw_request("PUT", path, fjord_server.host, headers))
        interim = conn.read_head()  # the body has not been sent: only an interim answer can come
        assert interim.status == 100, interim
        conn.send(data)
        final = conn.read_response()
        assert final.status == 200, (final, final.body)
    assert s3.get_object(Bucket=bucket, Key="expect")["Body"].read() == data


def test_expect_100_continue_with_signed_payload_from_botocore(fjord_server, s3, bucket, rng):
    """botocore sends Expect: 100-continue on every PutObject; this is its request, sent by hand."""
    from botocore.auth import S3SigV4Auth
    from botocore.awsrequest import AWSRequest
    from botocore.credentials import Credentials as BotoCredentials

    data = s3util.payload(rng, 64 * KiB)
    path = s3util.object_path(bucket, "expect-botocore")
    request = AWSRequest(method="PUT", url=fjord_server.endpoint + path, data=data,
                         headers={"Expect": "100-continue", "Content-Length": str(len(data))})
    S3SigV4Auth(BotoCredentials(fjord_server.access_key, fjord_server.secret_key), "s3",
                "us-east-1").add_auth(request)
    with connect(fjord_server) as conn:
        conn.send(raw_request("PUT", path, fjord_server.host, dict(request.headers.items())))
        interim = conn.read_head()
        assert interim.status == 100, interim
        conn.send(data)
        assert conn.read_response().status == 200
    assert s3.get_object(Bucket=bucket, Key="expect-botocore")["Body"].read() == data


def test_pipelined_gets_are_answered_in_order(fjord_server, s3, bucket, rng):
    objects = {f"pipe-{i}": s3util.payload(rng, 1000 * (i + 1)) for i in range(4)}
    for key, data in objects.items():
        s3.put_object(Bucket=bucket, Key=key, Body=data)
    batch = b"".join(signed_request(fjord_server, "GET", s3util.object_path(bucket, key))
                     for key in objects)
    batch += raw_request("GET", "/health/live", fjord_server.host, {})
    batch += signed_request(fjord_server, "GET", s3util.object_path(bucket, "pipe-0"),
                            headers={"connection": "close"})
    with connect(fjord_server) as conn:
        conn.send(batch)  # all requests in one write, before reading anything
        for key, data in objects.items():
            response = conn.read_response()
            assert response.status == 200, (key, response)
            assert response.body == data, key
        assert conn.read_response().status == 200
        last = conn.read_response()
        assert last.status == 200 and last.body == objects["pipe-0"]
        assert_closed_after_response(conn)


def test_client_vanishing_mid_body_leaves_no_object(fjord_server, s3, bucket, rng):
    path = s3util.object_path(bucket, "abandoned")
    for how in ("close", "reset"):
        conn = connect(fjord_server)
        head = signed_request(fjord_server, "PUT", path, payload_hash=s3util.UNSIGNED_PAYLOAD,
                              headers={"content-length": str(1024 * KiB)})
        conn.send(head)
        conn.send(s3util.payload(rng, 100 * KiB))
        if how == "reset":  # RST instead of FIN
            conn.sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        conn.close()
        assert_alive(fjord_server)
        with pytest.raises(ClientError) as excinfo:
            s3.head_object(Bucket=bucket, Key="abandoned")
        assert excinfo.value.response["ResponseMetadata"]["HTTPStatusCode"] == 404, how
    # The key is not stuck (no lock or half-written state left behind).
    s3.put_object(Bucket=bucket, Key="abandoned", Body=b"complete")
    assert s3.get_object(Bucket=bucket, Key="abandoned")["Body"].read() == b"complete"


def test_many_idle_connections_do_not_block_service(fjord_server):
    idle = [connect(fjord_server) for _ in range(50)]
    try:
        for conn in idle[:10]:
            conn.send(b"GET /health/ready HTTP/1.1\r\nHost: x\r\n")  # half a request, never finished
        assert_alive(fjord_server)
    finally:
        for conn in idle:
            conn.close()


# ---------------------------------------------------------------------------------------------------
# RFC 9112 conformance: request-target forms, Host, versions, oversized heads
# ---------------------------------------------------------------------------------------------------

def test_absolute_form_targets_are_served(fjord_server, s3, bucket, rng):
    """RFC 9112 3.2.2: a server must accept absolute-form; its authority is the host (Host is ignored)."""
    with connect(fjord_server) as conn:
        conn.send(f"GET http://{fjord_server.host}/health/ready HTTP/1.1\r\nHost: {fjord_server.host}\r\n\r\n".encode())
        assert conn.read_response().status == 200
        # A signed GET in absolute-form, signed for the authority as host.
        data = s3util.payload(rng, 3000)
        s3.put_object(Bucket=bucket, Key="absolute form", Body=data)
        path = s3util.object_path(bucket, "absolute form")
        signed = s3util.sign_headers(fjord_server.credentials, "GET", fjord_server.host, path)
        lines = [f"GET http://{fjord_server.host}{path} HTTP/1.1"] + [f"{k}: {v}" for k, v in signed.headers.items()]
        conn.send(("\r\n".join(lines) + "\r\n\r\n").encode())
        response = conn.read_response()
        assert response.status == 200, response.body
        assert response.body == data
        # The authority wins over a different Host: signed for the Host value, the request fails.
        signed = s3util.sign_headers(fjord_server.credentials, "GET", "elsewhere:1", path)
        lines = [f"GET http://{fjord_server.host}{path} HTTP/1.1"] + [f"{k}: {v}" for k, v in signed.headers.items()]
        conn.send(("\r\n".join(lines) + "\r\n\r\n").encode())
        response = conn.read_response()
        assert response.status == 403 and s3util.xml_children(response.body)["Code"] == "SignatureDoesNotMatch"


@pytest.mark.parametrize("request_bytes", [
    b"GET /health/ready HTTP/1.1\r\n\r\n",                          # no Host in HTTP/1.1
    b"GET /health/ready HTTP/1.1\r\nHost: h:abc\r\n\r\n",           # port is not a number
    b"GET /health/ready HTTP/1.1\r\nHost: :99999999\r\n\r\n",       # no host, port out of range
    b"GET /health/ready HTTP/1.1\r\nHost: a@b\r\n\r\n",             # userinfo
    b"GET /health/ready HTTP/1.1\r\nHost: h/x\r\n\r\n",             # a path
    b"GET http://a@b/health/ready HTTP/1.1\r\nHost: b\r\n\r\n",     # userinfo in an absolute-form target
], ids=["no-host", "bad-port", "port-overflow", "userinfo", "path-in-host", "absolute-userinfo"])
def test_missing_or_malformed_host_gets_400(fjord_server, request_bytes):
    with connect(fjord_server) as conn:
        conn.send(request_bytes)
        response = conn.read_response()
        assert response.status == 400, response
        assert_closed_after_response(conn)
    assert_alive(fjord_server)


@pytest.mark.parametrize("version", [b"HTTP/2.0", b"HTTP/3.0", b"HTTP/0.9"])
def test_other_http_versions_as_text_get_505(fjord_server, version):
    with connect(fjord_server) as conn:
        conn.send(b"GET /health/ready " + version + b"\r\nHost: x\r\n\r\n")
        response = conn.read_response()
        assert response.status == 505, response
        assert s3util.xml_children(response.body)["Code"] == "HttpVersionNotSupported"
        assert_closed_after_response(conn)


def test_an_oversized_head_gets_431_and_a_graceful_close(fjord_server):
    """The server answers once the head passes its limit, while the client is still sending: it must then
    read and discard before closing, or the client's next bytes meet a reset that destroys the answer."""
    head = b"GET /health/ready HTTP/1.1\r\nHost: x\r\nX-Pad: " + b"a" * (200 * KiB) + b"\r\n\r\n"
    with connect(fjord_server) as conn:
        def keep_sending():
            try:
                conn.send(head)
                for _ in range(32):
                    conn.send(b"b" * (16 * KiB))
            except OSError:
                pass

        sender = threading.Thread(target=keep_sending)
        sender.start()
        try:
            response = conn.read_response()
        finally:
            sender.join(timeout=30)
        assert response.status == 431, response
        assert s3util.xml_children(response.body)["Code"] == "RequestHeaderSectionTooLarge"
    assert_alive(fjord_server)


def test_a_request_pipelined_after_a_chunked_body_is_read_in_order(fjord_server, s3, bucket):
    """A chunked body that ends inside the bytes that came with its (large) head, read by the handler in
    small pieces (DeleteObjects reads 16 KiB at a time): the rest, the next request, must be served whole
    and in order, whatever piece of it the body read took."""
    s3.put_object(Bucket=bucket, Key="doomed", Body=b"x")
    body = b"<Delete><Object><Key>doomed</Key></Object></Delete>"
    path = s3util.object_path(bucket)
    signed = s3util.sign_headers(fjord_server.credentials, "POST", fjord_server.host, path, query=[("delete", "")],
                                 headers={"content-md5": s3util.md5_b64(body)}, payload_hash=s3util.sha256_hex(body))
    lines = [f"POST {path}?delete= HTTP/1.1"] + [f"{k}: {v}" for k, v in signed.headers.items()]
    lines += [f"X-Pad: {'a' * (40 * KiB)}", "Transfer-Encoding: chunked"]
    first = ("\r\n".join(lines) + "\r\n\r\n").encode() + f"{len(body):x}\r\n".encode() + body + b"\r\n0\r\n\r\n"
    second = (f"GET /health/live HTTP/1.1\r\nHost: {fjord_server.host}\r\nX-Pad: {'b' * (20 * KiB)}\r\n"
              "Connection: close\r\n\r\n").encode()
    with connect(fjord_server) as conn:
        conn.send(first + second)  # one write: both heads arrive in the head buffer together
        deleted = conn.read_response()
        assert deleted.status == 200, deleted.body
        assert s3util.xml_find_all(deleted.body, "Deleted/Key") == ["doomed"]
        response = conn.read_response()
        assert response.status == 200, response
        assert_closed_after_response(conn)
