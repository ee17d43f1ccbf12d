"""`fjord bench` against the real server: the benchmark programs run and report figures that make
sense (positive throughput, no errors, objects really written). Nothing here is timed: benchmarks are
programs that report figures, not tests with time limits."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from conftest import binary_path, empty_and_delete_bucket
from s3util import KiB, MiB

BENCH_TIMEOUT_S = 120


def run_bench(*args, env: dict | None = None, check: bool = True) -> subprocess.CompletedProcess:
    argv = [str(binary_path()), "bench"] + [str(a) for a in args]
    result = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=BENCH_TIMEOUT_S,
                            stdin=subprocess.DEVNULL)
    if check:
        assert result.returncode == 0, (f"{' '.join(argv)} exited with {result.returncode}\n"
                                        f"stdout:\n{result.stdout}\nstderr:\n{result.stderr}")
    return result


def bench_env(server, secret_key: str | None = None) -> dict:
    env = dict(os.environ)
    env.update({"FJORD_ACCESS_KEY": server.access_key,
                "FJORD_SECRET_KEY": secret_key if secret_key is not None else server.secret_key})
    return env


def run_s3_bench(server, bucket: str, json_path: Path, *args) -> dict:
    run_bench("s3", "--endpoint", server.endpoint, "--bucket", bucket, "--cores", 2,
              "--server-pid", server.process.pid, "--json", json_path, *args, env=bench_env(server))
    return json.loads(json_path.read_text())


def assert_healthy(result: dict, op: str):
    assert result["bench"] == "s3" and result["op"] == op
    assert result["errors"] == 0, result["first_error"]
    assert result["verify_failures"] == 0
    assert result["operations"] > 0
    assert result["bytes"] == result["operations"] * result["size_bytes"]
    assert result["throughput_gib_s"] > 0 and result["ops_per_s"] > 0 and result["seconds"] > 0
    latency = result["latency_ms"]
    assert 0 < latency["p50"] <= latency["p90"] <= latency["p99"] <= latency["p999"] <= latency["max"]
    assert result["client_cpu_s"] > 0 and result["server_cpu_s"] >= 0


@pytest.fixture
def bench_bucket(s3, bucket_name):
    """A bucket name the bench creates itself; emptied and deleted afterwards."""
    yield bucket_name
    empty_and_delete_bucket(s3, bucket_name)


def test_bench_s3_put_then_get_reuses_objects(fjord_server, s3, bench_bucket, tmp_dir):
    common = ["--size", "256KiB", "--concurrency", 4, "--objects", 8]
    put = run_s3_bench(fjord_server, bench_bucket, tmp_dir / "put.json", "--op", "put", "--duration", 1.5,
                       *common)
    assert_healthy(put, "put")
    assert put["by_op"]["get"]["operations"] == 0
    # The PUTs really landed: every key of the object set, at the requested size.
    keys = {item["Key"]: item["Size"] for item in s3.list_objects_v2(Bucket=bench_bucket)["Contents"]}
    assert keys == {f"bench/{i % 4}/{i // 4}": 256 * KiB for i in range(8)}

    get = run_s3_bench(fjord_server, bench_bucket, tmp_dir / "get.json", "--op", "get", "--duration", 1.5,
                       "--verify", *common)
    assert_healthy(get, "get")
    assert get["verify"] is True
    assert (get["reused_objects"], get["prepared_objects"]) == (8, 0)
    assert get["by_op"]["put"]["operations"] == 0


def test_bench_s3_unique_bodies_differ(fjord_server, s3, bench_bucket, tmp_dir):
    put = run_s3_bench(fjord_server, bench_bucket, tmp_dir / "put.json", "--op", "put", "--count", 8,
                       "--size", "64KiB", "--concurrency", 2, "--objects", 8, "--unique-bodies")
    assert_healthy(put, "put")
    # The two workers share one operation counter, so one of them may take five PUTs and the other three:
    # which of the 8 keys exist depends on scheduling (at least 4 do). Read back every object there is.
    keys = [o["Key"] for o in s3.list_objects_v2(Bucket=bench_bucket, Prefix="bench/").get("Contents", [])]
    assert 4 <= len(keys) <= 8
    bodies = [s3.get_object(Bucket=bench_bucket, Key=k)["Body"].read() for k in keys]
    assert all(len(b) == 64 * KiB for b in bodies)
    blocks = {b[o:o + 4096] for b in bodies for o in range(0, len(b), 4096)}
    assert len(blocks) == len(bodies) * 16, "no 4 KiB block repeats across or within the bodies"
    refused = run_bench("s3", "--endpoint", fjord_server.endpoint, "--bucket", bench_bucket, "--op", "get",
                        "--unique-bodies", "--verify", env=bench_env(fjord_server), check=False)
    assert refused.returncode == 2 and "--unique-bodies" in refused.stderr


def test_bench_s3_get_prepares_missing_objects_and_counts_exactly(fjord_server, bench_bucket, tmp_dir):
    get = run_s3_bench(fjord_server, bench_bucket, tmp_dir / "get.json", "--op", "get", "--count", 25,
                       "--size", "1MiB", "--concurrency", 3, "--objects", 5, "--verify")
    assert_healthy(get, "get")
    assert get["objects"] == 6  # rounded up to a multiple of the concurrency
    assert (get["prepared_objects"], get["reused_objects"]) == (6, 0)
    assert get["operations"] == 25


def test_bench_s3_mixed(fjord_server, bench_bucket, tmp_dir):
    mixed = run_s3_bench(fjord_server, bench_bucket, tmp_dir / "mixed.json", "--op", "mixed", "--count", 60,
                         "--size", "100KiB", "--concurrency", 4, "--objects", 4, "--verify")
    assert_healthy(mixed, "mixed")
    by_op = mixed["by_op"]
    assert by_op["put"]["operations"] > 0 and by_op["get"]["operations"] > 0
    assert by_op["put"]["operations"] + by_op["get"]["operations"] == 60


def test_bench_s3_reports_a_rejected_signature(fjord_server, bench_bucket, tmp_dir):
    result = run_bench("s3", "--endpoint", fjord_server.endpoint, "--bucket", bench_bucket, "--op", "put",
                       "--size", "4KiB", "--count", 2, "--json", tmp_dir / "bad.json",
                       env=bench_env(fjord_server, secret_key="not-the-secret"), check=False)
    assert result.returncode == 1
    assert "SignatureDoesNotMatch" in result.stderr


def test_bench_disk_small(tmp_dir):
    out = tmp_dir / "disk.json"
    result = run_bench("disk", "--dir", tmp_dir, "--size-mib", 8, "--block-kib", 256, "--depth", 4,
                       "--json", out, check=False)
    if result.returncode != 0 and "O_DIRECT" in result.stderr:
        pytest.skip(f"the file system under {tmp_dir} does not support O_DIRECT: {result.stderr.strip()}")
    assert result.returncode == 0, result.stderr
    disk = json.loads(out.read_text())
    assert disk["size_bytes"] == 8 * MiB and disk["block_bytes"] == 256 * KiB and disk["depth"] == 4
    assert disk["write_gib_s"] > 0 and disk["read_gib_s"] > 0
    assert disk["distinct_blocks"] is True
    assert disk["huge_page_bytes"] == 0  # 1 MiB of buffers (depth x block): below one huge page
    assert list(tmp_dir.iterdir()) == [out]  # the test file is gone


def test_bench_disk_on_small_pages(tmp_dir):
    out = tmp_dir / "disk.json"
    result = run_bench("disk", "--dir", tmp_dir, "--size-mib", 8, "--block-kib", 1024, "--depth", 4,
                       "--no-huge-pages", "--json", out, check=False)
    if result.returncode != 0 and "O_DIRECT" in result.stderr:
        pytest.skip(f"the file system under {tmp_dir} does not support O_DIRECT: {result.stderr.strip()}")
    assert result.returncode == 0, result.stderr
    assert json.loads(out.read_text())["huge_page_bytes"] == 0  # advised MADV_NOHUGEPAGE


def test_bench_net_small(tmp_dir):
    out = tmp_dir / "net.json"
    run_bench("net", "--seconds", 0.3, "--streams", 2, "--buffer-kib", 64, "--json", out)
    net = json.loads(out.read_text())
    assert net["streams"] == 2 and net["buffer_bytes"] == 64 * KiB
    assert net["bytes"] > 0 and net["gib_s"] > 0


def test_bench_rejects_unknown_options():
    result = run_bench("s3", "--bucket", "x", "--op", "put", "--no-such-option", 1, check=False)
    assert result.returncode == 2
    assert "unknown option --no-such-option" in result.stderr
