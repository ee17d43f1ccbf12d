"""fjord.torch against the real server: torch.distributed.checkpoint through FjordStorageWriter and
FjordStorageReader (1 rank in process; 4 ranks and a resharded 4 -> 2 load with gloo and DTensors in
rank processes, tests/integration/dcp_worker.py), async_save with the thread and the process executor,
saves killed half-way, an existing checkpoint never overwritten, damaged objects detected, errors that
name the problem, zero-copy loads (peak RSS), torch's own FsspecWriter/FsspecReader over fjord://,
save/load, and safetensors (checked against the safetensors package).

Runs under the SDK venv (build/venv-sdk, see test_python_sdk.py); skipped elsewhere.
"""

from __future__ import annotations

import io
import json
import os
import re
import select
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from conftest import free_port
from s3util import MiB

IN_SDK_VENV = "venv-sdk" in Path(sys.prefix).name
try:
    import torch
    import torch.distributed.checkpoint as dcp

    import fjord
    import fjord.torch as ft
except ImportError as missing:
    if IN_SDK_VENV:
        raise
    pytest.skip(f"needs fjord and torch ({missing}): run with build/venv-sdk/bin/python", allow_module_level=True)

WORKER = Path(__file__).resolve().parent / "dcp_worker.py"


@pytest.fixture(scope="module")
def client(fjord_server):
    c = fjord.Client(fjord_server.endpoint, fjord_server.access_key, fjord_server.secret_key)
    yield c
    c.close()


@pytest.fixture
def worker_env(fjord_server):
    env = dict(os.environ)
    env.update(FJORD_ENDPOINT=fjord_server.endpoint, FJORD_ACCESS_KEY=fjord_server.access_key,
               FJORD_SECRET_KEY=fjord_server.secret_key, OMP_NUM_THREADS="1")
    return env


def model_state(seed: int) -> dict:
    g = torch.Generator().manual_seed(seed)
    return {
        "model": {"w": torch.randn(256, 1024, generator=g), "b": torch.randn(1024, generator=g).to(torch.bfloat16),
                  "ids": torch.randint(0, 1 << 40, (333,), generator=g), "mask": torch.rand(17, generator=g) > 0.5,
                  "big": torch.randn(6 * MiB // 4, generator=g)},
        "optim": {"step": seed, "lr": 0.1 * seed, "names": ["a", "b"]},
    }


def zeros_like_state(sd):
    if isinstance(sd, dict):
        return {k: zeros_like_state(v) for k, v in sd.items()}
    if isinstance(sd, torch.Tensor):
        return torch.zeros_like(sd)
    return sd


def assert_identical(got, want):
    if isinstance(want, dict):
        assert got.keys() == want.keys()
        for k in want:
            assert_identical(got[k], want[k])
    elif isinstance(want, torch.Tensor):
        assert got.dtype == want.dtype and got.shape == want.shape
        assert torch.equal(got.view(torch.uint8), want.view(torch.uint8)), "tensor bytes differ"
    else:
        assert got == want


def run_ranks(action: str, uri: str, world: int, env: dict, seed: int = 1, timeout: float = 300,
              extra=()) -> list[dict]:
    port = free_port()
    procs = [subprocess.Popen([sys.executable, str(WORKER), action, uri, "--rank", str(r), "--world", str(world),
                               "--port", str(port), "--seed", str(seed), *extra], env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for r in range(world)]
    outs = []
    for p in procs:
        stdout, stderr = p.communicate(timeout=timeout)
        assert p.returncode == 0, f"rank exited with {p.returncode}:\n{stderr[-3000:]}"
        outs.append(json.loads(stdout.strip().splitlines()[-1]))
    return outs


def start_ranks(action: str, uri: str, world: int, env: dict):
    port = free_port()
    return [subprocess.Popen([sys.executable, str(WORKER), action, uri, "--rank", str(r), "--world", str(world),
                              "--port", str(port)], env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                             text=True) for r in range(world)]


class fails_with:
    """Expects an error of `kind` whose text matches `text`: raised as it is, or as the text of the
    CheckpointException (a BaseException) that DCP turns any rank's failure into."""

    def __init__(self, kind: type, text: str):
        self.kind, self.text = kind, text

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, tb):
        assert exc is not None, f"no error ({self.kind.__name__} matching {self.text!r} expected)"
        message = str(exc)
        if isinstance(exc, self.kind):
            assert re.search(self.text, message), message
        else:
            assert type(exc).__name__ == "CheckpointException", f"{type(exc).__name__}: {message}"
            assert re.search(self.text, message), message  # DCP keeps the text (not always the type)
        return True


def keys_under(client, bucket, prefix):
    return sorted(e.key for e in client.list(bucket, prefix))


# -- one process --------------------------------------------------------------------------------------

def test_save_and_load_one_rank_bit_identical(client, bucket):
    uri = f"s3://{bucket}/run/step-1"
    state = model_state(1)
    dcp.save(state, storage_writer=ft.FjordStorageWriter(uri, client=client), no_dist=True)
    keys = keys_under(client, bucket, "run/step-1/")
    assert "run/step-1/.metadata" in keys and len(keys) >= 3, keys  # metadata, the big tensor, the packed rest
    loaded = zeros_like_state(state)
    dcp.load(loaded, storage_reader=ft.FjordStorageReader(uri, client=client), no_dist=True)
    assert_identical(loaded, state)


def test_existing_checkpoint_is_never_overwritten_unless_asked(client, bucket):
    uri = f"s3://{bucket}/ckpt"
    dcp.save(model_state(1), storage_writer=ft.FjordStorageWriter(uri, client=client), no_dist=True)
    before = keys_under(client, bucket, "ckpt/")
    with fails_with(FileExistsError, "already exists"):
        dcp.save(model_state(2), storage_writer=ft.FjordStorageWriter(uri, client=client), no_dist=True)
    assert keys_under(client, bucket, "ckpt/") == before  # refused before any data was sent
    loaded = zeros_like_state(model_state(1))
    dcp.load(loaded, storage_reader=ft.FjordStorageReader(uri, client=client), no_dist=True)
    assert_identical(loaded, model_state(1))
    dcp.save(model_state(2), storage_writer=ft.FjordStorageWriter(uri, client=client, overwrite=True), no_dist=True)
    dcp.load(loaded, storage_reader=ft.FjordStorageReader(uri, client=client), no_dist=True)
    assert_identical(loaded, model_state(2))
    assert len(keys_under(client, bucket, "ckpt/")) == len(before)  # the first save's objects were removed


def test_damaged_object_fails_the_load(client, bucket, s3):
    uri = f"s3://{bucket}/damaged"
    state = model_state(3)
    dcp.save(state, storage_writer=ft.FjordStorageWriter(uri, client=client), no_dist=True)
    data_keys = [k for k in keys_under(client, bucket, "damaged/") if k.endswith(".bin")]
    for key in data_keys:
        body = bytearray(client.get(bucket, key))
        body[len(body) // 2] ^= 0x01  # one bit, same length: only an end-to-end checksum sees it
        s3.put_object(Bucket=bucket, Key=key, Body=bytes(body))
        loaded = zeros_like_state(state)
        with fails_with(fjord.Error, "checksum mismatch"):
            dcp.load(loaded, storage_reader=ft.FjordStorageReader(uri, client=client), no_dist=True)
        body[len(body) // 2] ^= 0x01
        s3.put_object(Bucket=bucket, Key=key, Body=bytes(body))
    dcp.load(loaded, storage_reader=ft.FjordStorageReader(uri, client=client), no_dist=True)
    assert_identical(loaded, state)


def test_errors_name_the_problem(fjord_server, client, bucket):
    state = model_state(4)
    with fails_with(fjord.NoSuchBucket, "no-such-bucket-for-ckpt"):
        dcp.save(state, storage_writer=ft.FjordStorageWriter("s3://no-such-bucket-for-ckpt/x", client=client),
                 no_dist=True)
    with fails_with(fjord.NoSuchKey, "no checkpoint at"):
        dcp.load(zeros_like_state(state), storage_reader=ft.FjordStorageReader(f"s3://{bucket}/never", client=client),
                 no_dist=True)
    bad = fjord.Client(fjord_server.endpoint, fjord_server.access_key, "wrong-secret-key-0123456789")
    try:
        with fails_with(fjord.AccessDenied, "SignatureDoesNotMatch"):
            dcp.save(state, storage_writer=ft.FjordStorageWriter(f"s3://{bucket}/denied", client=bad), no_dist=True)
        with fails_with(fjord.AccessDenied, "403"):
            dcp.load(zeros_like_state(state), storage_reader=ft.FjordStorageReader(f"s3://{bucket}/x", client=bad),
                     no_dist=True)
    finally:
        bad.close()
    assert not ft.FjordStorageWriter.validate_checkpoint_id("/local/path")
    assert ft.FjordStorageWriter.validate_checkpoint_id(f"s3://{bucket}/p")


def test_async_save_with_the_thread_executor_in_process(client, bucket):
    from torch.distributed.checkpoint.state_dict_saver import AsyncCheckpointerType
    state = model_state(5)
    writer = ft.FjordStorageWriter(client=client)  # one writer for every save, as a training loop keeps it
    expected, futures = [], []
    for step in range(3):  # the next save starts while the previous one may still upload
        for t in state["model"].values():
            t.logical_not_() if t.dtype == torch.bool else t.add_(1)
        expected.append({k: v.clone() for k, v in state["model"].items()})
        futures.append(dcp.async_save(state, checkpoint_id=f"s3://{bucket}/async-thread/{step}", storage_writer=writer,
                                      async_checkpointer_type=AsyncCheckpointerType.THREAD, no_dist=True))
        for t in state["model"].values():
            t.zero_()  # the training step goes on: the staged copy is what gets saved
    for f in futures:
        f.result(timeout=120)
    writer.close()
    for step in range(3):
        loaded = zeros_like_state(model_state(5))
        dcp.load(loaded, storage_reader=ft.FjordStorageReader(f"s3://{bucket}/async-thread/{step}", client=client),
                 no_dist=True)
        assert_identical(loaded["model"], expected[step])


def test_zero_copy_load_adds_little_to_peak_rss(client, bucket, worker_env):
    uri = f"s3://{bucket}/rss"
    total = 512 * MiB
    state = {f"t{i}": torch.full((64 * MiB // 4,), float(i)) for i in range(total // (64 * MiB))}
    dcp.save(state, storage_writer=ft.FjordStorageWriter(uri, client=client), no_dist=True)
    del state
    result = subprocess.run([sys.executable, "-c", textwrap.dedent(f"""
        import json, resource, torch, torch.distributed.checkpoint as dcp
        import fjord.torch as ft
        state = {{f"t{{i}}": torch.zeros(64 * 2**20 // 4) for i in range({total // (64 * MiB)})}}  # touched pages
        before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
        dcp.load(state, storage_reader=ft.FjordStorageReader({uri!r}), no_dist=True)
        after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
        ok = all(bool((t == float(i)).all()) for i, t in enumerate(state.values()))
        print(json.dumps({{"before": before, "after": after, "ok": ok}}))
    """)], env=worker_env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    out = json.loads(result.stdout.strip().splitlines()[-1])
    assert out["ok"]
    growth = out["after"] - out["before"]
    print(f"peak RSS grew by {growth / MiB:.1f} MiB loading {total / MiB:.0f} MiB")
    assert growth < 0.1 * total, f"peak RSS grew by {growth / MiB:.1f} MiB for a {total / MiB:.0f} MiB load"


# -- several ranks ------------------------------------------------------------------------------------

def test_four_ranks_save_and_load_then_reshard_to_two(client, bucket, worker_env):
    uri = f"s3://{bucket}/dist/step-9"
    assert [o.get("error") for o in run_ranks("save", uri, 4, worker_env, seed=9)] == [None] * 4
    assert [o.get("bad") for o in run_ranks("load", uri, 4, worker_env, seed=9)] == [[]] * 4
    assert [o.get("bad") for o in run_ranks("load", uri, 2, worker_env, seed=9)] == [[]] * 2
    assert [o.get("bad") for o in run_ranks("load", uri, 1, worker_env, seed=9)] == [[]]


def test_reshard_to_more_ranks_reads_parts_of_saved_chunks(client, bucket, worker_env):
    # 2 -> 4 and 2 -> 3 ranks: every new shard is part of a saved one (and with 3, pieces of two),
    # so the items go through read buffers and narrowing, not straight into the destination.
    uri = f"s3://{bucket}/dist/step-10"
    assert [o.get("error") for o in run_ranks("save", uri, 2, worker_env, seed=10)] == [None] * 2
    assert [o.get("bad") for o in run_ranks("load", uri, 4, worker_env, seed=10)] == [[]] * 4
    assert [o.get("bad") for o in run_ranks("load", uri, 3, worker_env, seed=10)] == [[]] * 3


def test_save_without_collectives_commits_one_metadata_per_rank(client, bucket, worker_env):
    uri = f"s3://{bucket}/dist/local-meta"
    assert [o.get("error") for o in run_ranks("save-no-collectives", uri, 2, worker_env, seed=12)] == [None] * 2
    keys = keys_under(client, bucket, "dist/local-meta/")
    assert "dist/local-meta/__0.metadata" in keys and "dist/local-meta/__1.metadata" in keys
    assert "dist/local-meta/.metadata" not in keys
    assert [o.get("bad") for o in run_ranks("load-no-collectives", uri, 2, worker_env, seed=12)] == [[]] * 2


@pytest.mark.parametrize("executor", ["thread", "process"])
def test_async_save_returns_before_the_upload_and_completes(client, bucket, worker_env, executor, tmp_dir):
    uri = f"s3://{bucket}/async-{executor}"
    # The writer waits for a gate that the caller opens after async_save returned and it changed the
    # tensors: the save can only complete while the caller goes on.
    outs = run_ranks(f"async-save-{executor}", uri, 2, worker_env, seed=11, extra=["--gate", str(tmp_dir / "gate")])
    assert [o.get("error") for o in outs] == [None, None], outs
    assert not any(o["done_at_return"] for o in outs), outs
    # the tensors were zeroed right after async_save returned: the staged values are what was saved
    assert [o.get("bad") for o in run_ranks("load", uri, 2, worker_env, seed=11)] == [[], []]


@pytest.mark.parametrize("where", ["in-write", "before-commit"])
def test_a_save_killed_half_way_is_not_loadable_and_the_previous_one_is_intact(client, bucket, worker_env, where):
    previous = f"s3://{bucket}/kill/step-1"
    run_ranks("save", previous, 2, worker_env, seed=1)
    uri = f"s3://{bucket}/kill/step-2"
    procs = start_ranks(f"save-hang-{where}", uri, 2, worker_env)
    try:
        deadline = time.monotonic() + 120
        for p in procs:  # every rank reports that it wrote its data (or half of it) and now hangs
            ready, _, _ = select.select([p.stdout], [], [], max(0.0, deadline - time.monotonic()))
            assert ready, "a rank did not report its data written within 120 s"
            line = p.stdout.readline()
            assert '"state"' in line, line
        assert any(k.endswith(".bin") for k in keys_under(client, bucket, "kill/step-2/"))
    finally:
        for p in procs:
            p.send_signal(signal.SIGKILL)
            p.wait()
    assert not client.exists(bucket, "kill/step-2/.metadata")
    outs = run_ranks("load", uri, 2, worker_env, seed=2)
    assert all("no checkpoint at" in (o.get("error") or "") for o in outs), outs
    assert [o.get("bad") for o in run_ranks("load", previous, 2, worker_env, seed=1)] == [[], []]


# -- fsspec, save/load, safetensors ---------------------------------------------------------------------

def test_torch_fsspec_writer_and_reader_over_fjord_urls(fjord_server, bucket):
    from torch.distributed.checkpoint import FsspecReader, FsspecWriter
    options = dict(endpoint_url=fjord_server.endpoint, key=fjord_server.access_key, secret=fjord_server.secret_key)
    uri = f"fjord://{bucket}/fsspec-ckpt"
    state = model_state(6)
    dcp.save(state, storage_writer=FsspecWriter(uri, **options), no_dist=True)
    loaded = zeros_like_state(state)
    dcp.load(loaded, storage_reader=FsspecReader(uri, **options), no_dist=True)
    assert_identical(loaded, state)


def test_save_and_load_one_object(client, bucket):
    state = model_state(7)
    ft.save(state, f"s3://{bucket}/model.pt", client=client)
    assert_identical(ft.load(f"s3://{bucket}/model.pt", client=client), state)
    with pytest.raises(fjord.NoSuchKey):
        ft.load(f"s3://{bucket}/missing.pt", client=client)


def test_safetensors_round_trip_and_lazy_reads(client, bucket):
    import safetensors.torch
    tensors = {"a": torch.randn(300, 7), "b": torch.arange(10, dtype=torch.int64), "c": torch.randn(5).to(torch.bfloat16),
               "empty": torch.zeros(0, 3), "big": torch.randn(3 * MiB)}
    ft.save_safetensors(tensors, f"s3://{bucket}/w.safetensors", metadata={"format": "pt"}, client=client)
    raw = client.get(bucket, "w.safetensors")
    assert_identical(safetensors.torch.load(raw), tensors)  # the reference reader agrees
    client.put(bucket, "ref.safetensors", safetensors.torch.save(tensors, metadata={"k": "v"}))
    assert_identical(ft.load_safetensors(f"s3://{bucket}/ref.safetensors", client=client), tensors)
    with ft.safe_open(f"s3://{bucket}/ref.safetensors", client=client) as f:
        assert sorted(f.keys()) == sorted(tensors) and f.metadata() == {"k": "v"}
        assert_identical(f.get_tensor("c"), tensors["c"])
    client.put(bucket, "junk.safetensors", b"\xff" * 100)
    with pytest.raises(fjord.Error, match="header"):
        ft.load_safetensors(f"s3://{bucket}/junk.safetensors", client=client)
