"""XML request bodies hold only what XML 1.0 allows: character references to non-characters (&#x0;,
surrogates, beyond U+10FFFF, overflowing numbers), raw control bytes, bytes that are not UTF-8 and bare
'&' are refused with MalformedXML, for every body the server parses (DeleteObjects,
CompleteMultipartUpload, PutObjectTagging), never truncated or passed on as invalid UTF-8.

The bodies are hand-made and signed by s3util, since no SDK sends them."""

import pytest

import s3util
from multipart_support import MIN_PART_BYTES, error_code, signed_request

ILLEGAL_REFERENCES = ["&#x0;", "&#0;", "&#xD800;", "&#xDFFF;", "&#x110000;", "&#99999999999;",
                      "&#x1;", "&#31;", "&#xFFFE;", "&#xFFFF;", "&#x;", "&#;", "&#xZZ;"]
ILLEGAL_RAW = [b"\x00", b"\x01", b"\x1f", b"\xff", b"\xc0\xae", b"\xed\xa0\x80", b"&", b"& amp;", b"&bogus;"]


def delete_objects(server, bucket, body: bytes):
    return signed_request(server, "POST", bucket, query=[("delete", "")],
                          headers={"Content-MD5": s3util.md5_b64(body)}, body=body)


def keys(s3, bucket):
    return sorted(o["Key"] for o in s3.list_objects_v2(Bucket=bucket).get("Contents", []))


@pytest.mark.parametrize("reference", ILLEGAL_REFERENCES)
def test_delete_objects_refuses_references_to_non_characters(fjord_server, s3, bucket, reference):
    """The review's case: keys nz/a and nz/a<NUL>b; a body naming nz/a&#x0;b deleted nz/a."""
    s3.put_object(Bucket=bucket, Key="nz/a", Body=b"a")
    s3.put_object(Bucket=bucket, Key="nz/a\x00b", Body=b"a-nul-b")
    body = f"<Delete><Object><Key>nz/a{reference}b</Key></Object></Delete>".encode()
    response = delete_objects(fjord_server, bucket, body)
    assert response.status_code == 400, response.text
    assert error_code(response) == "MalformedXML", response.text
    assert keys(s3, bucket) == ["nz/a", "nz/a\x00b"]


@pytest.mark.parametrize("body", [
    b'<Delete a="<!--"><Object><Key>nz/a&#0;b</Key></Object><x y="-->"/></Delete>',
    b'<Delete a="<![CDATA["><Object><Key>nz/a&#0;b</Key></Object><x y="]]>"/></Delete>',
    b'<Delete a="<?"><Object><Key>nz/a&#0;b</Key></Object><x y="?>"/></Delete>',
    b'<Delete><Object b="&#0;"><Key>nz/a</Key></Object></Delete>',
], ids=["comment-in-attribute", "cdata-in-attribute", "pi-in-attribute", "reference-in-attribute"])
def test_no_markup_trick_hides_an_illegal_reference(fjord_server, s3, bucket, body):
    """A check that scans the raw text for references can be led past one by markup it does not
    expect; the reader checks every reference in the parsed tree instead."""
    s3.put_object(Bucket=bucket, Key="nz/a", Body=b"a")
    response = delete_objects(fjord_server, bucket, body)
    assert response.status_code == 400, response.text
    assert error_code(response) == "MalformedXML", response.text
    assert keys(s3, bucket) == ["nz/a"]


@pytest.mark.parametrize("raw", ILLEGAL_RAW, ids=lambda r: r.hex())
def test_delete_objects_refuses_raw_bytes_xml_cannot_carry(fjord_server, s3, bucket, raw):
    s3.put_object(Bucket=bucket, Key="nz/a", Body=b"a")
    body = b"<Delete><Object><Key>nz/a" + raw + b"b</Key></Object></Delete>"
    response = delete_objects(fjord_server, bucket, body)
    assert response.status_code == 400, response.text
    assert error_code(response) == "MalformedXML", response.text
    assert keys(s3, bucket) == ["nz/a"]


def test_delete_objects_decodes_legal_references_and_cdata_exactly(fjord_server, s3, bucket):
    names = ["cr\rkey", "tab\tkey", "amp&key", "lt<key", "\u00e9t\u00e9", "astral-\U0001F600", "   ", "mixed&<key"]
    for name in names:
        s3.put_object(Bucket=bucket, Key=name, Body=b"x")
    body = ("<Delete>"
            "<Object><Key>cr&#13;key</Key></Object>"
            "<Object><Key>tab&#x9;key</Key></Object>"
            "<Object><Key><![CDATA[amp&key]]></Key></Object>"
            "<Object><Key>lt&lt;key</Key></Object>"
            "<Object><Key>&#xe9;t\u00e9</Key></Object>"
            "<Object><Key>astral-&#x1F600;</Key></Object>"
            "<Object><Key>   </Key></Object>"
            "<Object><Key>mixed&amp;<![CDATA[<]]>key</Key></Object>"
            "</Delete>").encode()
    response = delete_objects(fjord_server, bucket, body)
    assert response.status_code == 200, response.text
    assert sorted(s3util.xml_find_all(response.content, "Deleted/Key")) == sorted(names)
    assert keys(s3, bucket) == []


def test_complete_multipart_upload_refuses_illegal_references(fjord_server, s3, bucket):
    upload = s3.create_multipart_upload(Bucket=bucket, Key="assembled")["UploadId"]
    part = s3.upload_part(Bucket=bucket, Key="assembled", UploadId=upload, PartNumber=1, Body=b"p" * MIN_PART_BYTES)
    etag = part["ETag"].strip('"')
    for reference in ["&#x0;", "&#xD800;", "&#99999999999;"]:
        body = (f"<CompleteMultipartUpload><Part><PartNumber>1</PartNumber>"
                f"<ETag>{etag}{reference}</ETag></Part></CompleteMultipartUpload>").encode()
        response = signed_request(fjord_server, "POST", bucket, "assembled", query=[("uploadId", upload)], body=body)
        assert response.status_code == 400, response.text
        assert error_code(response) == "MalformedXML", response.text
    # The upload is untouched and completes with a clean body.
    body = (f"<CompleteMultipartUpload><Part><PartNumber>1</PartNumber><ETag>&quot;{etag}&quot;</ETag></Part>"
            f"</CompleteMultipartUpload>").encode()
    response = signed_request(fjord_server, "POST", bucket, "assembled", query=[("uploadId", upload)], body=body)
    assert response.status_code == 200, response.text
    assert s3.head_object(Bucket=bucket, Key="assembled")["ContentLength"] == MIN_PART_BYTES


def test_put_object_tagging_refuses_illegal_references_and_control_characters(fjord_server, s3, bucket):
    s3.put_object(Bucket=bucket, Key="tagged", Body=b"x")
    for value in ["a&#x0;b", "a&#xD800;b", "a&#1;b", "a&#10;b"]:
        body = f"<Tagging><TagSet><Tag><Key>k</Key><Value>{value}</Value></Tag></TagSet></Tagging>".encode()
        response = signed_request(fjord_server, "PUT", bucket, "tagged", query=[("tagging", "")],
                                  headers={"Content-MD5": s3util.md5_b64(body)}, body=body)
        assert response.status_code == 400, response.text
        assert error_code(response) in ("MalformedXML", "InvalidTag"), response.text
    assert s3.get_object_tagging(Bucket=bucket, Key="tagged")["TagSet"] == []
    # The same through x-amz-tagging, which is URL-encoded: the control characters arrive decoded.
    response = signed_request(fjord_server, "PUT", bucket, "tagged-header", headers={"x-amz-tagging": "k=a%00b"},
                              body=b"x")
    assert response.status_code == 400 and error_code(response) == "InvalidTag", response.text
