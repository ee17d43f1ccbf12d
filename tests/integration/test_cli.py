"""The `fjord` object commands (cp, ls, rm, mb, rb) and the bench additions (--op head|delete|list,
--report) against the real server, checked through boto3: bytes exact, keys where they belong, errors
as non-zero exits with one clear line. Then what a newcomer meets first: the command list, every
command's --help, and --version (no server needed)."""

from __future__ import annotations

import json
import os
import subprocess
import xml.etree.ElementTree as ElementTree
from pathlib import Path

import pytest

from conftest import binary_path, empty_and_delete_bucket, unique_bucket_name
from s3util import KiB, MiB

CLI_TIMEOUT_S = 60


def fjord(server, *args, secret_key: str | None = None, check: bool = True,
          endpoint: str | None = None) -> subprocess.CompletedProcess:
    """Runs `fjord ARGS` with the endpoint and keys in the environment (as a user would)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("FJORD_")}
    env.update({"FJORD_ENDPOINT": endpoint or server.endpoint, "FJORD_ACCESS_KEY": server.access_key,
                "FJORD_SECRET_KEY": secret_key if secret_key is not None else server.secret_key})
    argv = [str(binary_path())] + [str(a) for a in args]
    result = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=CLI_TIMEOUT_S,
                            stdin=subprocess.DEVNULL)
    if check:
        assert result.returncode == 0, (f"{' '.join(argv)} exited with {result.returncode}\n"
                                        f"stdout:\n{result.stdout}\nstderr:\n{result.stderr}")
    return result


def assert_failed_with_one_line(result: subprocess.CompletedProcess, *fragments: str):
    assert result.returncode == 1, result
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    for fragment in fragments:
        assert fragment in lines[0], lines[0]


def make_tree(root: Path, rng) -> dict[str, bytes]:
    """A few files in nested directories, one of them past the multipart threshold (8 MiB)."""
    files = {"a.txt": b"hello\n", "empty": b"", "sub/b c&d.bin": rng.randbytes(300 * KiB),
             "sub/deeper/big.bin": rng.randbytes(9 * MiB + 1)}
    for name, data in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_bytes(data)
    return files


def object_bytes(s3, bucket: str, key: str) -> bytes:
    return s3.get_object(Bucket=bucket, Key=key)["Body"].read()


def test_cp_file_up_and_down_byte_exact(fjord_server, s3, bucket, tmp_dir, rng):
    small, big = tmp_dir / "small.bin", tmp_dir / "big.bin"
    small.write_bytes(rng.randbytes(100 * KiB + 3))
    big.write_bytes(rng.randbytes(6 * MiB + 5))  # > 5 MiB; multipart when the threshold is below it
    fjord(fjord_server, "cp", small, f"s3://{bucket}/dir/small.bin")
    fjord(fjord_server, "cp", big, f"s3://{bucket}/dir/", "--multipart-threshold", "5MiB", "--part-size", "5MiB")
    assert object_bytes(s3, bucket, "dir/small.bin") == small.read_bytes()
    assert object_bytes(s3, bucket, "dir/big.bin") == big.read_bytes()
    # The multipart upload really happened: an S3 multipart ETag ends in -<parts>.
    assert s3.head_object(Bucket=bucket, Key="dir/big.bin")["ETag"].strip('"').endswith("-2")

    down = tmp_dir / "down"
    down.mkdir()
    fjord(fjord_server, "cp", f"s3://{bucket}/dir/big.bin", down, "--multipart-threshold", "5MiB")
    fjord(fjord_server, "cp", f"s3://{bucket}/dir/small.bin", down / "renamed.bin")
    assert (down / "big.bin").read_bytes() == big.read_bytes()
    assert (down / "renamed.bin").read_bytes() == small.read_bytes()


def test_cp_recursive_up_and_down_byte_exact(fjord_server, s3, bucket, tmp_dir, rng):
    source = tmp_dir / "source"
    files = make_tree(source, rng)
    result = fjord(fjord_server, "cp", "--recursive", source, f"s3://{bucket}/tree", "--jobs", 3)
    assert "uploaded 4 files" in result.stdout
    listed = {item["Key"]: item["Size"] for item in s3.list_objects_v2(Bucket=bucket)["Contents"]}
    assert listed == {f"tree/{name}": len(data) for name, data in files.items()}
    for name, data in files.items():
        assert object_bytes(s3, bucket, f"tree/{name}") == data

    target = tmp_dir / "target"
    result = fjord(fjord_server, "cp", "-r", f"s3://{bucket}/tree/", target)
    assert "downloaded 4 files" in result.stdout
    got = {str(p.relative_to(target)): p.read_bytes() for p in target.rglob("*") if p.is_file()}
    assert got == files
    # Not a terminal: no progress line, nothing on stderr.
    assert result.stderr == ""


def test_ls_lists_buckets_keys_and_prefixes(fjord_server, s3, bucket):
    for key in ("top.txt", "dir/one", "dir/two", "dir/sub/three"):
        s3.put_object(Bucket=bucket, Key=key, Body=b"x" * 7)
    assert bucket in fjord(fjord_server, "ls").stdout.split()
    top = fjord(fjord_server, "ls", f"s3://{bucket}").stdout
    assert "PRE dir/" in top and "top.txt" in top and "dir/one" not in top
    inside = fjord(fjord_server, "ls", f"s3://{bucket}/dir/").stdout
    assert "dir/one" in inside and "dir/two" in inside and "PRE dir/sub/" in inside
    everything = fjord(fjord_server, "ls", "--recursive", f"s3://{bucket}").stdout
    for key in ("top.txt", "dir/one", "dir/two", "dir/sub/three"):
        assert f" 7 {key}" in everything


def test_ls_follows_pages(fjord_server, s3, bucket):
    keys = [f"k/{i:04d}" for i in range(1005)]  # more than one page of 1000
    fjord(fjord_server, "bench", "s3", "--endpoint", fjord_server.endpoint, "--bucket", bucket, "--op", "list",
          "--count", 1, "--objects", 1005, "--concurrency", 5, "--size", 1)
    listed = fjord(fjord_server, "ls", "--recursive", f"s3://{bucket}/bench/").stdout.splitlines()
    assert len(listed) == len(keys)


def test_rm_single_and_recursive(fjord_server, s3, bucket):
    for key in ("keep", "gone", "tree/a", "tree/b/c"):
        s3.put_object(Bucket=bucket, Key=key, Body=b"data")
    fjord(fjord_server, "rm", f"s3://{bucket}/gone")
    result = fjord(fjord_server, "rm", "--recursive", f"s3://{bucket}/tree/")
    assert "deleted 2 objects" in result.stdout
    assert [item["Key"] for item in s3.list_objects_v2(Bucket=bucket)["Contents"]] == ["keep"]


def test_rm_recursive_more_than_one_batch(fjord_server, s3, bucket):
    fjord(fjord_server, "bench", "s3", "--endpoint", fjord_server.endpoint, "--bucket", bucket, "--op", "list",
          "--count", 1, "--objects", 1010, "--concurrency", 5, "--size", 1)
    result = fjord(fjord_server, "rm", "--recursive", f"s3://{bucket}")
    assert "deleted 1010 objects" in result.stdout
    assert s3.list_objects_v2(Bucket=bucket)["KeyCount"] == 0


def test_mb_and_rb(fjord_server, s3):
    name = unique_bucket_name("mb")
    try:
        assert fjord(fjord_server, "mb", f"s3://{name}").stdout.strip() == f"make_bucket: {name}"
        s3.head_bucket(Bucket=name)
        s3.put_object(Bucket=name, Key="x", Body=b"1")
        assert_failed_with_one_line(fjord(fjord_server, "rb", f"s3://{name}", check=False), "BucketNotEmpty")
        s3.delete_object(Bucket=name, Key="x")
        assert fjord(fjord_server, "rb", f"s3://{name}").stdout.strip() == f"remove_bucket: {name}"
        assert name not in [b["Name"] for b in s3.list_buckets()["Buckets"]]
    finally:
        empty_and_delete_bucket(s3, name)


def test_errors_exit_non_zero_with_one_line(fjord_server, bucket, tmp_dir):
    missing = unique_bucket_name("missing")
    local = tmp_dir / "f"
    local.write_bytes(b"abc")
    assert_failed_with_one_line(fjord(fjord_server, "ls", f"s3://{missing}", check=False), "NoSuchBucket")
    assert_failed_with_one_line(fjord(fjord_server, "cp", local, f"s3://{missing}/f", check=False), "NoSuchBucket")
    assert_failed_with_one_line(fjord(fjord_server, "rm", f"s3://{missing}/f", check=False), "NoSuchBucket")
    assert_failed_with_one_line(fjord(fjord_server, "cp", f"s3://{bucket}/nothing", tmp_dir / "x", check=False),
                                "no such key")
    assert not (tmp_dir / "x").exists()
    assert_failed_with_one_line(fjord(fjord_server, "ls", secret_key="wrong-secret", check=False),
                                "403", "SignatureDoesNotMatch")
    assert_failed_with_one_line(fjord(fjord_server, "cp", local, f"s3://{bucket}/f", secret_key="wrong-secret",
                                      check=False), "SignatureDoesNotMatch")
    assert_failed_with_one_line(fjord(fjord_server, "cp", tmp_dir / "nope", f"s3://{bucket}/f", check=False),
                                "nope")
    # Usage errors exit with 2.
    assert fjord(fjord_server, "cp", local, check=False).returncode == 2
    assert fjord(fjord_server, "rm", f"s3://{bucket}", check=False).returncode == 2


def test_flags_override_environment(fjord_server, bucket):
    result = fjord(fjord_server, "ls", f"s3://{bucket}", "--endpoint", fjord_server.endpoint,
                   "--access-key", fjord_server.access_key, "--secret-key", fjord_server.secret_key,
                   secret_key="wrong-secret", endpoint="http://127.0.0.1:1")
    assert result.returncode == 0


@pytest.mark.parametrize("op", ["head", "delete", "list"])
def test_bench_s3_small_ops(fjord_server, s3, bucket_name, tmp_dir, op):
    json_path = tmp_dir / f"{op}.json"
    try:
        fjord(fjord_server, "bench", "s3", "--endpoint", fjord_server.endpoint, "--bucket", bucket_name,
              "--op", op, "--count", 40, "--concurrency", 4, "--objects", 40 if op != "list" else 1200,
              "--size", "1KiB", "--json", json_path)
        result = json.loads(json_path.read_text())
        assert result["op"] == op and result["errors"] == 0, result["first_error"]
        assert result["operations"] == 40 and result["by_op"][op]["operations"] == 40
        latency = result["latency_ms"]
        assert 0 < latency["p50"] <= latency["p99"] <= latency["max"]
        keys = s3.list_objects_v2(Bucket=bucket_name).get("KeyCount", 0)
        if op == "delete":
            assert keys == 0  # every PUT was followed by its DELETE
        if op == "list":
            # 40 pages over 1200 keys: pages of 1000 and 200 in turn for each worker.
            assert result["listed_keys"] >= 40 * 200
    finally:
        empty_and_delete_bucket(s3, bucket_name)


def assert_report(directory: Path, bench: str):
    assert json.loads((directory / "results.json").read_text())["bench"] == bench
    markdown = (directory / "report.md").read_text()
    assert markdown.startswith("# fjord bench") and "|---|" in markdown
    svg = ElementTree.parse(directory / "chart.svg").getroot()
    assert svg.tag == "{http://www.w3.org/2000/svg}svg"
    bars = [r for r in svg.iter("{http://www.w3.org/2000/svg}rect") if r.find("{http://www.w3.org/2000/svg}title") is not None]
    assert bars and all(float(r.get("height")) >= 0 for r in bars)
    return bars


def test_bench_reports(fjord_server, s3, bucket_name, tmp_dir):
    try:
        fjord(fjord_server, "bench", "s3", "--endpoint", fjord_server.endpoint, "--bucket", bucket_name,
              "--op", "put", "--count", 8, "--concurrency", 2, "--size", "64KiB", "--report", tmp_dir / "s3")
        bars = assert_report(tmp_dir / "s3", "s3")
        assert len(bars) == 4  # p50, p90, p99, p99.9 of the one op
        fjord(fjord_server, "bench", "checkpoint", "--endpoint", fjord_server.endpoint, "--bucket", bucket_name,
              "--scale", "1/1024", "--ranks", 2, "--checkpoints", 2, "--compute-seconds", 0,
              "--report", tmp_dir / "ckpt")
        bars = assert_report(tmp_dir / "ckpt", "checkpoint")
        assert len(bars) == 4  # write and read for each of 2 checkpoints
    finally:
        empty_and_delete_bucket(s3, bucket_name)


COMMANDS = ["serve", "cp", "ls", "rm", "mb", "rb", "admin", "cluster", "bench", "client", "scrub"]
# Subcommands whose --help is the command's (they take it anywhere on the line).
SUBCOMMANDS = [["cluster", "status"], ["cluster", "init"], ["cluster", "heal"], ["cluster", "topology"],
               ["cluster", "replace-node"], ["cluster", "remove-node"], ["bench", "kv"], ["bench", "s3"],
               ["bench", "disk"], ["bench", "net"], ["bench", "checkpoint"], ["bench", "ec"],
               ["admin", "user", "add"], ["client", "put"], ["serve", "--data", "./x"]]


def run_plain(*args) -> subprocess.CompletedProcess:
    return subprocess.run([str(binary_path()), *args], capture_output=True, text=True,
                          timeout=CLI_TIMEOUT_S, stdin=subprocess.DEVNULL)


@pytest.mark.parametrize("how", [["help"], ["--help"], ["-h"]])
def test_help_lists_every_command_with_one_line(how):
    out = run_plain(*how)
    assert out.returncode == 0, out
    listed = {line.split()[0] for line in out.stdout.splitlines() if line.startswith("  ")}
    assert set(COMMANDS) <= listed, out.stdout
    assert out.stderr == ""


def test_no_command_or_an_unknown_one_is_a_usage_error():
    bare = run_plain()
    assert bare.returncode == 2 and "commands:" in bare.stderr and bare.stdout == ""
    unknown = run_plain("frobnicate")
    assert unknown.returncode == 2 and "no command frobnicate" in unknown.stderr


@pytest.mark.parametrize("line", [[c] for c in COMMANDS] + SUBCOMMANDS, ids=" ".join)
def test_every_command_prints_its_usage_for_help_and_exits_0(line):
    for flag in ("--help", "-h"):
        out = run_plain(*line, flag)
        assert out.returncode == 0, out
        assert out.stdout.startswith("usage: fjord "), out.stdout[:200]
        assert out.stderr == ""
    assert run_plain("help", line[0]).stdout == run_plain(line[0], "--help").stdout


def test_version_names_the_version_and_commit():
    for how in ("--version", "version"):
        out = run_plain(how)
        assert out.returncode == 0, out
        words = out.stdout.split()
        assert words[0] == "fjord" and words[1].count(".") == 2, out.stdout
        commit = words[3].rstrip(")")
        assert words[2] == "(commit" and (commit == "unknown" or len(commit.split("-")[0]) >= 7), out.stdout
