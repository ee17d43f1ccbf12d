"""Keys that round-trip: what S3 refuses is refused (keys and listing parameters that are not UTF-8), and
every key that can be stored comes back exactly, in a well-formed listing, whatever encoding-type.

Listings are fetched by hand without encoding-type, since boto3 and the aws CLI always ask for url."""

import xml.etree.ElementTree as ElementTree
from urllib.parse import unquote

import pytest
import requests

import s3util
from multipart_support import error_code, signed_request

NS = "{http://s3.amazonaws.com/doc/2006-03-01/}"


def raw_put(server, bucket, encoded_key, body=b"x"):
    path = f"/{bucket}/{encoded_key}"
    signed = s3util.sign_headers(server.credentials, "PUT", server.host, path, payload_hash=s3util.sha256_hex(body))
    return requests.put(server.endpoint + path, data=body, headers=signed.headers, timeout=30)


def listing(server, bucket, query):
    response = signed_request(server, "GET", bucket, query=query)
    assert response.status_code == 200, response.text
    root = ElementTree.fromstring(response.content)  # must be well-formed XML
    return root


def listed_keys(root):
    url = root.findtext(f"{NS}EncodingType") == "url"
    keys = [e.text or "" for e in root.iter(f"{NS}Key")]
    return [unquote(k) for k in keys] if url else keys, url


@pytest.mark.parametrize("encoded", ["bad%ff%fe", "overlong%c0%ae", "surrogate%ed%a0%80", "truncated%e2%82"])
def test_keys_that_are_not_utf8_are_refused(fjord_server, s3, bucket, encoded):
    response = raw_put(fjord_server, bucket, encoded)
    assert response.status_code == 400, response.text
    assert error_code(response) == "InvalidURI", response.text
    assert s3.list_objects_v2(Bucket=bucket)["KeyCount"] == 0
    # A listing parameter that is not UTF-8 is refused the same way (before authentication, as the
    # request cannot even be routed).
    response = requests.get(f"{fjord_server.endpoint}/{bucket}?list-type=2&prefix=%FF", timeout=30)
    assert response.status_code == 400, response.text
    assert error_code(response) == "InvalidURI", response.text


CONTROL_KEYS = ["c0/\x01start", "c0/mid\x1fdle", "c0/bell\x07", "c0/esc\x1b[0m", "c0/nul\x00byte"]
XML_KEYS = ["x/cr\rkey", "x/crlf\r\nkey", "x/tab\tkey", "x/lf\nkey", "x/amp&lt<gt>", "x/\u00e9\U0001F600", "x/ space "]


@pytest.mark.parametrize("version", ["1", "2"])
def test_listings_are_well_formed_for_every_storable_key(fjord_server, s3, bucket, version):
    for key in CONTROL_KEYS + XML_KEYS:
        s3.put_object(Bucket=bucket, Key=key, Body=key.encode())
    base_query = [("list-type", "2")] if version == "2" else []

    # Keys XML 1.0 can carry come back raw, exactly (a CR too: it is sent as a character reference).
    keys, url = listed_keys(listing(fjord_server, bucket, base_query + [("prefix", "x/")]))
    assert not url
    assert keys == sorted(XML_KEYS)

    # A page with a key XML 1.0 cannot carry is sent URL-encoded, and says so.
    keys, url = listed_keys(listing(fjord_server, bucket, base_query + [("prefix", "c0/")]))
    assert url
    assert keys == sorted(CONTROL_KEYS)

    # With delimiter, the common prefixes too; and every key reads back.
    root = listing(fjord_server, bucket, base_query + [("delimiter", "/")])
    assert sorted(unquote(p.text) for p in root.iter(f"{NS}Prefix") if p.text) == ["c0/", "x/"]
    for key in CONTROL_KEYS + XML_KEYS:
        assert s3.get_object(Bucket=bucket, Key=key)["Body"].read() == key.encode()

    # boto3 (encoding-type=url) sees the same keys.
    listed = sorted(o["Key"] for o in s3.list_objects_v2(Bucket=bucket)["Contents"])
    assert listed == sorted(CONTROL_KEYS + XML_KEYS)


def test_multipart_upload_listing_is_well_formed_for_control_keys(fjord_server, s3, bucket):
    uploads = {key: s3.create_multipart_upload(Bucket=bucket, Key=key)["UploadId"] for key in ["mp/\x02a", "mp/plain"]}
    try:
        root = listing(fjord_server, bucket, [("uploads", "")])
        keys, url = listed_keys(root)
        assert url and sorted(keys) == sorted(uploads)
    finally:
        for key, upload_id in uploads.items():
            s3.abort_multipart_upload(Bucket=bucket, Key=key, UploadId=upload_id)
