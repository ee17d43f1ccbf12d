"""Nothing a client sends can end a response header line early: the response-* overrides of GET and HEAD
(which a presigned URL carries, so whoever makes the URL chooses them) and every stored value the server
echoes (metadata, tags, checksums) either fit in a header value or are refused with an S3 error."""

import pytest
import requests

import s3util
from conftest import make_client
from multipart_support import error_code, signed_request
from s3util import RawConnection

OVERRIDES = ["response-content-disposition", "response-content-type", "response-cache-control",
             "response-content-language", "response-expires", "response-content-encoding"]
SPLITTING = "attachment\r\nContent-Length: 0\r\n\r\nHTTP/1.1 200 OK\r\nX-Forged: yes\r\nContent-Length: 6\r\n\r\nforged"


def presigned_raw(server, method, path, extra_query):
    query = s3util.presign_query(server.credentials, method, server.host, path, 300, extra_query=extra_query)
    with RawConnection("127.0.0.1", server.port) as conn:
        conn.send(f"{method} {path}?{query} HTTP/1.1\r\nHost: {server.host}\r\nConnection: close\r\n\r\n".encode())
        return conn.read_until_close()


@pytest.mark.parametrize("method", ["GET", "HEAD"])
@pytest.mark.parametrize("param", OVERRIDES)
def test_response_overrides_with_line_breaks_are_refused(fjord_server, s3, bucket, method, param):
    s3.put_object(Bucket=bucket, Key="report.pdf", Body=b"the real body")
    path = s3util.object_path(bucket, "report.pdf")
    raw = presigned_raw(fjord_server, method, path, [(param, SPLITTING)])
    head, _, body = raw.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 400"), raw[:300]
    assert b"X-Forged" not in raw and raw.count(b"HTTP/1.1 ") == 1, raw
    if method == "GET":
        assert s3util.xml_children(body)["Code"] == "InvalidArgument"


@pytest.mark.parametrize("bad", ["\x00", "\r", "\n", "\x01", "\x7f"], ids=["nul", "cr", "lf", "soh", "del"])
def test_every_control_byte_in_an_override_is_refused(fjord_server, s3, bucket, bad):
    s3.put_object(Bucket=bucket, Key="k", Body=b"x")
    path = s3util.object_path(bucket, "k")
    raw = presigned_raw(fjord_server, "GET", path, [("response-content-type", f"text/plain{bad}x")])
    assert raw.startswith(b"HTTP/1.1 400"), raw[:200]


def test_legal_overrides_are_sent_as_given(fjord_server, s3, bucket):
    s3.put_object(Bucket=bucket, Key="k", Body=b"body")
    url = make_client(fjord_server, signature_version="s3v4").generate_presigned_url("get_object", Params={
        "Bucket": bucket, "Key": "k", "ResponseContentDisposition": 'attachment; filename="r\u00e9sum\u00e9.txt"',
        "ResponseContentType": "text/x-test", "ResponseCacheControl": "no-cache"}, ExpiresIn=300)
    response = requests.get(url, timeout=30)
    assert response.status_code == 200 and response.content == b"body"
    assert response.headers["Content-Type"] == "text/x-test"
    assert response.headers["Cache-Control"] == "no-cache"
    # Sent as its UTF-8 bytes (obs-text), as it came.
    assert response.raw.headers["Content-Disposition"].encode("latin-1").decode() == \
        'attachment; filename="r\u00e9sum\u00e9.txt"'


def test_stored_values_that_are_echoed_cannot_hold_line_breaks(fjord_server, s3, bucket):
    # Metadata and stored headers come from request headers, whose parser refuses CR, LF and NUL.
    with RawConnection("127.0.0.1", fjord_server.port) as conn:
        signed = s3util.sign_headers(fjord_server.credentials, "PUT", fjord_server.host,
                                     s3util.object_path(bucket, "meta"), headers={"x-amz-meta-note": "a"})
        headers = dict(signed.headers)
        lines = [f"PUT {s3util.object_path(bucket, 'meta')} HTTP/1.1"] + [f"{k}: {v}" for k, v in headers.items()]
        request = "\r\n".join(lines).replace("x-amz-meta-note: a", "x-amz-meta-note: a\x01b") + \
            "\r\nContent-Length: 1\r\n\r\nx"
        conn.send(request.encode())
        assert conn.read_response().status == 400
    # Tags come URL-encoded in x-amz-tagging: decoded line breaks are refused.
    response = signed_request(fjord_server, "PUT", bucket, "tagged", headers={"x-amz-tagging": "k=a%0D%0AX-Forged%3A%20yes"},
                              body=b"x")
    assert response.status_code == 400 and error_code(response) == "InvalidTag", response.text
    # A checksum header the client claims is checked against the data, so only a real one is stored.
    response = signed_request(fjord_server, "PUT", bucket, "summed",
                              headers={"x-amz-checksum-crc32": "not base64!"}, body=b"x")
    assert response.status_code == 400, response.text
