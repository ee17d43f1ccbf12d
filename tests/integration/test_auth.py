"""Authentication and the shape of errors, with hand-made requests signed by botocore's SigV4 signer
(and, where botocore cannot be told the time, by s3util's, which test_s3util checks against botocore)."""

import datetime
import re

import pytest
import requests
from botocore.auth import S3SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials as BotoCredentials
from botocore.exceptions import ClientError

import s3util
from conftest import REGION, FjordServer

TIMEOUT_S = 30


def botocore_signed(server, method, path, body=b"", headers=None, access_key=None, secret_key=None,
                    send_body=None, region=REGION):
    """Signs with botocore's S3SigV4Auth (payload hash over `body`) and sends with requests.
    `send_body` replaces the body after signing (to tamper with it)."""
    request = AWSRequest(method=method, url=server.endpoint + path, data=body, headers=headers or {})
    credentials = BotoCredentials(access_key or server.access_key, secret_key or server.secret_key)
    S3SigV4Auth(credentials, "s3", region).add_auth(request)
    prepared = request.prepare()
    return requests.request(method, prepared.url, headers=dict(prepared.headers),
                            data=prepared.body if send_body is None else send_body, timeout=TIMEOUT_S)


def assert_s3_error(response, status, code):
    """The response is an S3 error document with the given status and code, and the usual fields."""
    assert response.status_code == status, (response.status_code, response.text)
    fields = s3util.xml_children(response.content)
    assert s3util.xml_root_tag(response.content) == "Error"
    assert fields.get("Code") == code, response.text
    assert fields.get("Message"), response.text
    assert fields.get("Resource"), response.text
    assert fields.get("RequestId"), response.text
    assert fields["RequestId"] == response.headers.get("x-amz-request-id")
    return fields


def object_exists(s3, bucket, key) -> bool:
    try:
        s3.head_object(Bucket=bucket, Key=key)
        return True
    except ClientError as error:
        assert error.response["ResponseMetadata"]["HTTPStatusCode"] == 404
        return False


@pytest.fixture
def stored(s3, bucket):
    s3.put_object(Bucket=bucket, Key="secret.txt", Body=b"top secret")
    return bucket, s3util.object_path(bucket, "secret.txt")


# ---------------------------------------------------------------------------------------------------
# Who may do what
# ---------------------------------------------------------------------------------------------------

def test_signed_request_by_botocore_signer_succeeds(fjord_server, stored):
    """The positive control for the tests below: same helper, right keys, 200."""
    _, path = stored
    response = botocore_signed(fjord_server, "GET", path)
    assert response.status_code == 200, response.text
    assert response.content == b"top secret"


def test_anonymous_requests_are_access_denied(fjord_server, s3, stored):
    bucket, path = stored
    assert_s3_error(requests.get(fjord_server.endpoint + path, timeout=TIMEOUT_S), 403, "AccessDenied")
    assert_s3_error(requests.get(fjord_server.endpoint + "/", timeout=TIMEOUT_S), 403, "AccessDenied")
    put = requests.put(fjord_server.endpoint + s3util.object_path(bucket, "anon"), data=b"x",
                       timeout=TIMEOUT_S)
    assert_s3_error(put, 403, "AccessDenied")
    assert not object_exists(s3, bucket, "anon")


def test_wrong_secret_is_signature_does_not_match(fjord_server, s3, stored):
    bucket, path = stored
    assert_s3_error(botocore_signed(fjord_server, "GET", path, secret_key="not-the-secret"),
                    403, "SignatureDoesNotMatch")
    put = botocore_signed(fjord_server, "PUT", s3util.object_path(bucket, "forged"), body=b"forged",
                          secret_key="not-the-secret")
    assert_s3_error(put, 403, "SignatureDoesNotMatch")
    assert not object_exists(s3, bucket, "forged")


def test_unknown_access_key_is_invalid_access_key_id(fjord_server, stored):
    _, path = stored
    response = botocore_signed(fjord_server, "GET", path, access_key="AKIAUNKNOWNUNKNOWN00")
    assert_s3_error(response, 403, "InvalidAccessKeyId")


def test_a_signature_scoped_to_another_region_is_refused_with_the_right_region(fjord_server, stored):
    """S3 checks the region of the credential scope: AuthorizationHeaderMalformed names the expected
    region (which SDKs use to retry there), for the header form and for presigned URLs."""
    _, path = stored
    response = botocore_signed(fjord_server, "GET", path, region="eu-west-1")
    fields = assert_s3_error(response, 400, "AuthorizationHeaderMalformed")
    assert fields.get("Region") == REGION, response.text
    assert "'eu-west-1' is wrong; expecting 'us-east-1'" in fields["Message"]

    elsewhere = s3util.Credentials(fjord_server.access_key, fjord_server.secret_key, "eu-west-1")
    query = s3util.presign_query(elsewhere, "GET", fjord_server.host, path, 300)
    presigned = requests.get(f"{fjord_server.endpoint}{path}?{query}", timeout=TIMEOUT_S)
    fields = assert_s3_error(presigned, 400, "AuthorizationQueryParametersError")
    assert fields.get("Region") == REGION, presigned.text
    # The right region still works, for both forms.
    assert botocore_signed(fjord_server, "GET", path).content == b"top secret"
    right = s3util.presign_query(fjord_server.credentials, "GET", fjord_server.host, path, 300)
    assert requests.get(f"{fjord_server.endpoint}{path}?{right}", timeout=TIMEOUT_S).content == b"top secret"


def test_a_server_in_another_region_refuses_the_default_region(tmp_dir):
    server = FjordServer(tmp_dir / "region", extra_args=["--region", "eu-central-1"])
    server.start()
    try:
        response = botocore_signed(server, "GET", "/")
        fields = assert_s3_error(response, 400, "AuthorizationHeaderMalformed")
        assert fields.get("Region") == "eu-central-1"
        assert botocore_signed(server, "GET", "/", region="eu-central-1").status_code == 200
    finally:
        server.stop()


def test_tampered_payload_is_sha256_mismatch_and_not_stored(fjord_server, s3, bucket):
    path = s3util.object_path(bucket, "tampered")
    response = botocore_signed(fjord_server, "PUT", path, body=b"the signed body!",
                               send_body=b"another body!!!!")
    assert_s3_error(response, 400, "XAmzContentSHA256Mismatch")
    assert not object_exists(s3, bucket, "tampered")


def test_tampered_overwrite_keeps_the_previous_object(fjord_server, s3, bucket):
    s3.put_object(Bucket=bucket, Key="kept", Body=b"original")
    response = botocore_signed(fjord_server, "PUT", s3util.object_path(bucket, "kept"),
                               body=b"replacement", send_body=b"REPLACEMENT")
    assert_s3_error(response, 400, "XAmzContentSHA256Mismatch")
    assert s3.get_object(Bucket=bucket, Key="kept")["Body"].read() == b"original"


@pytest.mark.parametrize("skew", [datetime.timedelta(hours=-1), datetime.timedelta(hours=1)])
def test_skewed_request_time_is_rejected(fjord_server, stored, skew):
    _, path = stored
    signed = s3util.sign_headers(fjord_server.credentials, "GET", fjord_server.host, path,
                                 payload_hash=s3util.EMPTY_SHA256, when=s3util.utc_now() + skew)
    response = requests.get(fjord_server.endpoint + path, headers=signed.headers, timeout=TIMEOUT_S)
    assert_s3_error(response, 403, "RequestTimeTooSkewed")
    # The same signer with the right clock is accepted: the rejection is about time, nothing else.
    signed = s3util.sign_headers(fjord_server.credentials, "GET", fjord_server.host, path,
                                 payload_hash=s3util.EMPTY_SHA256)
    assert requests.get(fjord_server.endpoint + path, headers=signed.headers,
                        timeout=TIMEOUT_S).status_code == 200


# ---------------------------------------------------------------------------------------------------
# Presigned URLs
# ---------------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def presigner(fjord_server):
    # boto3 presigns with SigV2 (AWSAccessKeyId/Signature/Expires) for custom endpoints unless asked
    # for s3v4; Fjord implements SigV4 presigning.
    return fjord_server.client(signature_version="s3v4")


def test_presigned_get(presigner, stored):
    bucket, _ = stored
    url = presigner.generate_presigned_url("get_object", Params={"Bucket": bucket, "Key": "secret.txt"},
                                           ExpiresIn=300)
    assert "X-Amz-Signature=" in url
    response = requests.get(url, timeout=TIMEOUT_S)
    assert response.status_code == 200, response.text
    assert response.content == b"top secret"


def test_presigned_get_with_altered_signature_is_rejected(presigner, stored):
    bucket, _ = stored
    url = presigner.generate_presigned_url("get_object", Params={"Bucket": bucket, "Key": "secret.txt"},
                                           ExpiresIn=300)
    signature = re.search(r"X-Amz-Signature=([0-9a-f]{64})", url).group(1)
    altered = url.replace(signature, ("0" if signature[0] != "0" else "1") + signature[1:])
    assert_s3_error(requests.get(altered, timeout=TIMEOUT_S), 403, "SignatureDoesNotMatch")


def test_presigned_put(presigner, s3, bucket, rng):
    data = s3util.payload(rng, 20_000)
    url = presigner.generate_presigned_url("put_object", Params={"Bucket": bucket, "Key": "uploaded"},
                                           ExpiresIn=300)
    response = requests.put(url, data=data, timeout=TIMEOUT_S)
    assert response.status_code == 200, response.text
    assert s3.get_object(Bucket=bucket, Key="uploaded")["Body"].read() == data


def test_expired_presigned_url_is_access_denied(fjord_server, stored):
    _, path = stored
    creds, host = fjord_server.credentials, fjord_server.host
    # Signed two minutes ago, valid for one: expired a minute ago (no waiting needed).
    expired = s3util.presign_query(creds, "GET", host, path, expires_s=60,
                                   when=s3util.utc_now() - datetime.timedelta(seconds=120))
    assert_s3_error(requests.get(f"{fjord_server.endpoint}{path}?{expired}", timeout=TIMEOUT_S),
                    403, "AccessDenied")
    # Control: the same code signing now yields a URL the server accepts.
    fresh = s3util.presign_query(creds, "GET", host, path, expires_s=60)
    response = requests.get(f"{fjord_server.endpoint}{path}?{fresh}", timeout=TIMEOUT_S)
    assert response.status_code == 200, response.text


def test_a_plus_in_the_query_means_what_the_signature_covered(fjord_server, s3, bucket):
    """'+' in a query string is a space, to the signature as to the listing: a URL presigned for the
    prefix "a+b" (sent as a%2Bb) refuses the same query with a raw '+' (which lists "a b"), and a URL
    signed for "a b" may send the space as '+' (the Java SDK v1 does)."""
    s3.put_object(Bucket=bucket, Key="a+b/plus", Body=b"1")
    s3.put_object(Bucket=bucket, Key="a b/space", Body=b"2")
    creds, host, path = fjord_server.credentials, fjord_server.host, s3util.object_path(bucket)

    def listed(query: str):
        response = requests.get(f"{fjord_server.endpoint}{path}?{query}", timeout=TIMEOUT_S)
        return response, re.findall(r"<Key>([^<]*)</Key>", response.text)

    plus = s3util.presign_query(creds, "GET", host, path, 300, extra_query=[("prefix", "a+b")])
    assert "prefix=a%2Bb" in plus
    response, keys = listed(plus)
    assert response.status_code == 200 and keys == ["a+b/plus"], response.text
    assert_s3_error(listed(plus.replace("prefix=a%2Bb", "prefix=a+b"))[0], 403,
                    "SignatureDoesNotMatch")
    space = s3util.presign_query(creds, "GET", host, path, 300, extra_query=[("prefix", "a b")])
    assert "prefix=a%20b" in space
    response, keys = listed(space.replace("prefix=a%20b", "prefix=a+b"))
    assert response.status_code == 200 and keys == ["a b/space"], response.text


@pytest.mark.parametrize("expires,message", [
    ("604801", "X-Amz-Expires must be less than a week (in seconds) that is 604800 seconds"),
    ("0", "X-Amz-Expires must be at least 1 second"),
    ("-1", "X-Amz-Expires must be non-negative"),
    ("soon", "X-Amz-Expires should be a number"),
])
def test_presigned_url_with_expires_out_of_range_is_refused_as_s3_does(fjord_server, stored, expires, message):
    _, path = stored
    query = s3util.presign_query(fjord_server.credentials, "GET", fjord_server.host, path, 300)
    query = query.replace("X-Amz-Expires=300", f"X-Amz-Expires={expires}")
    fields = assert_s3_error(requests.get(f"{fjord_server.endpoint}{path}?{query}", timeout=TIMEOUT_S),
                             400, "AuthorizationQueryParametersError")
    assert fields["Message"] == message
    # The longest S3 allows is accepted.
    week = s3util.presign_query(fjord_server.credentials, "GET", fjord_server.host, path, 604800)
    assert requests.get(f"{fjord_server.endpoint}{path}?{week}", timeout=TIMEOUT_S).status_code == 200


def test_presigned_url_expiring_in_one_second(fjord_server, stored):
    _, path = stored
    creds, host = fjord_server.credentials, fjord_server.host
    signed_at = s3util.utc_now().replace(microsecond=0)
    url = f"{fjord_server.endpoint}{path}?" + s3util.presign_query(creds, "GET", host, path, 1,
                                                                   when=signed_at)
    # Wait, by the clock, until the URL is certainly past X-Amz-Date + 1 s, then use it.
    s3util.wait_until(lambda: s3util.utc_now() >= signed_at + datetime.timedelta(seconds=2.5),
                      timeout_s=5, interval_s=0.1, what="the presigned URL to expire")
    assert_s3_error(requests.get(url, timeout=TIMEOUT_S), 403, "AccessDenied")


# ---------------------------------------------------------------------------------------------------
# Health, request ids, error documents
# ---------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("endpoint", ["/health/ready", "/health/live"])
def test_health_endpoints_need_no_auth_and_reveal_nothing(fjord_server, endpoint):
    response = requests.get(fjord_server.endpoint + endpoint, timeout=TIMEOUT_S)
    assert response.status_code == 200
    body = response.text
    assert len(response.content) <= 256, body
    assert fjord_server.access_key not in body and fjord_server.secret_key not in body
    assert not re.search(r"\d+\.\d+\.\d+", body), f"looks like a version: {body!r}"
    assert "version" not in body.lower()
    assert str(fjord_server.work_dir) not in body
    for value in response.headers.values():
        assert fjord_server.access_key not in value and fjord_server.secret_key not in value


def test_every_response_has_a_request_id(fjord_server, stored):
    bucket, path = stored
    responses = [
        botocore_signed(fjord_server, "GET", path),                                   # 200
        botocore_signed(fjord_server, "HEAD", path),                                  # 200, no body
        botocore_signed(fjord_server, "GET", s3util.object_path(bucket, "missing")),  # 404
        botocore_signed(fjord_server, "HEAD", s3util.object_path(bucket, "missing")),  # 404, no body
        botocore_signed(fjord_server, "PUT", "/Invalid_Bucket_Name"),                 # 400
        requests.get(fjord_server.endpoint + path, timeout=TIMEOUT_S),                # 403
        botocore_signed(fjord_server, "DELETE", s3util.object_path(bucket, "gone")),  # 204
        botocore_signed(fjord_server, "GET", "/"),                                    # ListBuckets
        requests.get(fjord_server.endpoint + "/health/ready", timeout=TIMEOUT_S),
        requests.get(fjord_server.endpoint + "/health/live", timeout=TIMEOUT_S),
    ]
    assert [r.status_code for r in responses] == [200, 200, 404, 404, 400, 403, 204, 200, 200, 200]
    ids = [r.headers.get("x-amz-request-id") for r in responses]
    assert all(ids), ids
    assert len(set(ids)) == len(ids), f"request ids repeat: {ids}"


def test_error_document_shape(fjord_server, stored):
    bucket, _ = stored
    response = botocore_signed(fjord_server, "GET", s3util.object_path(bucket, "no/such key"))
    fields = assert_s3_error(response, 404, "NoSuchKey")
    assert "xml" in response.headers.get("content-type", ""), response.headers
    assert "no/such key" in fields["Resource"] or "no/such%20key" in fields["Resource"], fields
    assert response.content.lstrip().startswith(b"<?xml") or response.content.lstrip().startswith(b"<Error")


def test_boto3_reports_server_error_codes(fjord_server, bucket):
    bad = fjord_server.client(secret_key="wrong-secret")
    with pytest.raises(ClientError) as excinfo:
        bad.list_objects_v2(Bucket=bucket)
    assert excinfo.value.response["Error"]["Code"] == "SignatureDoesNotMatch"
    assert excinfo.value.response["ResponseMetadata"]["RequestId"]
    unknown = fjord_server.client(access_key="AKIAUNKNOWNUNKNOWN00")
    with pytest.raises(ClientError) as excinfo:
        unknown.list_buckets()
    assert excinfo.value.response["Error"]["Code"] == "InvalidAccessKeyId"


def test_unsupported_signature_config_still_produces_s3_error(fjord_server, bucket):
    """A SigV2-signed request (what old clients send) is refused with an S3 error, not a crash."""
    sigv2 = fjord_server.client(signature_version="s3")
    with pytest.raises(ClientError) as excinfo:
        sigv2.list_objects_v2(Bucket=bucket)
    status = excinfo.value.response["ResponseMetadata"]["HTTPStatusCode"]
    assert 400 <= status < 500, status
    assert excinfo.value.response["Error"]["Code"]
    assert fjord_server.is_ready()

