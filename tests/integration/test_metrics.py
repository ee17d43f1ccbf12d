"""GET /metrics: Prometheus text, SigV4 required unless --metrics-public, counters that follow the traffic,
and a bucket named "metrics" that stays usable."""

import os
import socket
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import requests

import s3util
from conftest import fetch_metrics, make_client, metric_value, server_metric


def requests_counted(server, operation: str, status: str) -> int:
    return server_metric(server, f'fjord_requests_total{{operation="{operation}",status="{status}"}}')


def test_metrics_need_a_signature_by_default(fjord_server):
    anonymous = fetch_metrics(fjord_server, signed=False)
    assert anonymous.status_code == 403
    assert s3util.xml_children(anonymous.content)["Code"] == "AccessDenied"
    wrong_key = s3util.Credentials(fjord_server.access_key, "not-the-secret")
    forged = requests.get(f"{fjord_server.endpoint}/metrics", timeout=10,
                          headers=s3util.sign_headers(wrong_key, "GET", fjord_server.host, "/metrics").headers)
    assert forged.status_code == 403
    signed = fetch_metrics(fjord_server)
    assert signed.status_code == 200
    assert signed.headers["Content-Type"].startswith("text/plain; version=0.0.4")
    assert "# TYPE fjord_data_corrupted_total counter" in signed.text


def test_metrics_public_serves_without_a_signature(make_server):
    server = make_server(["--metrics-public"])
    anonymous = fetch_metrics(server, signed=False)
    assert anonymous.status_code == 200, anonymous.text
    assert metric_value(anonymous.text, "fjord_data_corrupted_total") == 0
    assert fetch_metrics(server).status_code == 200
    # Only /metrics is public: S3 requests still need a signature.
    assert requests.get(f"{server.endpoint}/", timeout=10).status_code == 403


def test_requests_bytes_and_connections_are_counted(make_server):
    server = make_server()
    s3 = make_client(server)
    s3.create_bucket(Bucket="counted")
    reads_before = requests_counted(server, "read", "2xx")
    writes_before = requests_counted(server, "write", "2xx")
    missing_before = requests_counted(server, "read", "4xx")
    received_before = server_metric(server, "fjord_bytes_received_total")
    sent_before = server_metric(server, "fjord_bytes_sent_total")
    body = b"m" * 100_000
    for i in range(3):
        s3.put_object(Bucket="counted", Key=f"k{i}", Body=body)
    for i in range(2):
        assert s3.get_object(Bucket="counted", Key=f"k{i}")["Body"].read() == body
    s3.head_object(Bucket="counted", Key="k2")
    try:
        s3.get_object(Bucket="counted", Key="absent")
    except s3.exceptions.NoSuchKey:
        pass
    # A request is counted once its answer has gone out, so the client may read it a moment earlier.
    s3util.wait_until(lambda: requests_counted(server, "read", "4xx") - missing_before == 1, timeout_s=10)
    assert requests_counted(server, "write", "2xx") - writes_before == 3
    assert requests_counted(server, "read", "2xx") - reads_before == 3
    assert requests_counted(server, "read", "4xx") - missing_before == 1
    assert server_metric(server, "fjord_bytes_received_total") - received_before >= 3 * len(body)
    assert server_metric(server, "fjord_bytes_sent_total") - sent_before >= 2 * len(body)

    # Held connections show in the gauge until they close. Open besides them: the boto3 client's one
    # and the scrape's own (earlier scrapes' connections may linger a moment).
    open_gauge = "fjord_connections_open"
    held = [socket.create_connection(("127.0.0.1", server.port)) for _ in range(5)]
    s3util.wait_until(lambda: server_metric(server, open_gauge) >= 5 + 2, timeout_s=10, what="7 open")
    for sock in held:
        sock.close()
    s3util.wait_until(lambda: server_metric(server, open_gauge) <= 2, timeout_s=10, what="held ones closed")


def test_spare_data_files_are_counted(make_server):
    """A replaced object's data file (1 MiB or more) is kept as a spare, then reused by a write of its size."""
    server = make_server()
    s3 = make_client(server)
    s3.create_bucket(Bucket="spares")
    kept = 'fjord_spare_data_files_total{event="kept"}'
    reused = 'fjord_spare_data_files_total{event="reused"}'
    body = os.urandom(3 * 1024 * 1024)
    s3.put_object(Bucket="spares", Key="k", Body=body)
    assert server_metric(server, kept) == 0 and server_metric(server, "fjord_spare_data_bytes") == 0
    s3.put_object(Bucket="spares", Key="k", Body=body)  # frees the first file: a spare
    assert server_metric(server, kept) == 1
    assert server_metric(server, "fjord_spare_data_bytes") >= len(body)
    s3.put_object(Bucket="spares", Key="k2", Body=body)  # takes it
    assert server_metric(server, reused) == 1
    assert server_metric(server, "fjord_spare_data_bytes") == 0
    assert s3.get_object(Bucket="spares", Key="k")["Body"].read() == body
    assert s3.get_object(Bucket="spares", Key="k2")["Body"].read() == body


def test_key_lock_waits_and_cross_core_overflow_are_shown(make_server):
    """Concurrent writes of one key wait for each other's commit: how many waited and the longest line are
    in /metrics, beside the cross-core overflow figures."""
    server = make_server()
    s3 = make_client(server)
    s3.create_bucket(Bucket="contended")
    assert server_metric(server, "fjord_key_lock_waits_total") == 0
    assert server_metric(server, "fjord_cross_core_overflow_total") >= 0
    assert server_metric(server, "fjord_cross_core_overflow_peak") >= 0

    def writer(_):
        client = make_client(server)
        for _ in range(20):
            client.put_object(Bucket="contended", Key="k", Body=b"x" * 4096)

    with ThreadPoolExecutor(16) as pool:
        list(pool.map(writer, range(16)))
    assert server_metric(server, "fjord_key_lock_waits_total") > 0
    assert server_metric(server, "fjord_key_lock_waiters_peak") >= 1


def test_spare_data_files_no_write_takes_are_removed(make_server):
    """--spare-data-idle-seconds: spares unused that long are removed (the server looks every second here)."""
    server = make_server(["--spare-data-idle-seconds", "2"])
    s3 = make_client(server)
    s3.create_bucket(Bucket="idle")
    body = os.urandom(2 * 1024 * 1024)
    s3.put_object(Bucket="idle", Key="k", Body=body)
    s3.put_object(Bucket="idle", Key="k", Body=body)
    assert server_metric(server, 'fjord_spare_data_files_total{event="kept"}') == 1
    s3util.wait_until(lambda: server_metric(server, "fjord_spare_data_bytes") == 0, timeout_s=15,
                      what="the idle spare removed")
    assert server_metric(server, 'fjord_spare_data_files_total{event="removed"}') == 1
    assert all(not list(Path(d, "spare").iterdir()) for d in server.data_dirs)
    assert s3.get_object(Bucket="idle", Key="k")["Body"].read() == body


def test_a_bucket_named_metrics_stays_usable(fjord_server):
    s3 = make_client(fjord_server)
    try:
        s3.create_bucket(Bucket="metrics")
        s3.put_object(Bucket="metrics", Key="metrics", Body=b"an object, not the counters")
        listed = s3.list_objects_v2(Bucket="metrics")
        assert [item["Key"] for item in listed["Contents"]] == ["metrics"]
        assert [item["Key"] for item in s3.list_objects(Bucket="metrics")["Contents"]] == ["metrics"]
        assert s3.get_object(Bucket="metrics", Key="metrics")["Body"].read() == b"an object, not the counters"
        virtual = fjord_server.client(addressing_style="virtual")
        assert virtual.get_object(Bucket="metrics", Key="metrics")["Body"].read() == b"an object, not the counters"
    finally:
        s3.delete_object(Bucket="metrics", Key="metrics")
        s3.delete_bucket(Bucket="metrics")
