"""Saves and loads a synthetic sharded state dict with torch.distributed.checkpoint, RANKS gloo processes on
this machine, through four storage paths against the same `fjord serve` (bench/dcp.sh starts it):

  fjord             fjord.torch.FjordStorageWriter / FjordStorageReader (the native client)
  s3torchconnector  s3torchconnector.dcp.S3StorageWriter / S3StorageReader (the AWS CRT)
  s3fs              torch's FsspecWriter / FsspecReader over s3fs (botocore, aiohttp)
  local             torch's FileSystemWriter / FileSystemReader on the server's disk (fsync on)

and, for fjord, how long async_save blocks the training loop against a blocking save. Every rank
holds total/RANKS bytes: bf16 tensors of 64 MiB and of 1-8 MiB, and a few small ones, as a model's shard
looks. Times are wall times between barriers (the slowest rank). Loads go into preallocated tensors and
are checked bit for bit afterwards (outside the timing). The page cache is dropped before every load
when the kernel allows it (the server reads with O_DIRECT anyway; the local path would otherwise read
from memory).

    dcp_bench.py run --endpoint URL --bucket B --local-dir DIR [--gib 4] [--ranks 4] [--methods ...] [--json F]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time

MiB = 1 << 20
METHODS = ["fjord", "s3torchconnector", "s3fs", "local"]


def shard_shapes(rank_bytes: int) -> list[tuple[str, int]]:
    """(name, elements) of bf16 tensors adding up to rank_bytes: 70 % in 64 MiB tensors, the rest in 1-8
    MiB ones, plus small ones (norms, biases)."""
    out, left, i = [], rank_bytes, 0
    big = int(rank_bytes * 0.7) // (64 * MiB)
    for _ in range(big):
        out.append((f"layers.{i}.mlp", 32 * MiB))
        left -= 64 * MiB
        i += 1
    sizes = [MiB, 2 * MiB, 4 * MiB, 8 * MiB]
    while left > 8 * MiB + 64 * 1024:
        n = sizes[i % 4]
        out.append((f"layers.{i}.attn", n // 2))
        left -= n
        i += 1
    for j in range(16):
        out.append((f"norms.{j}", 2048))
        left -= 4096
    if left > 0:
        out.append(("tail", left // 2))
    return out


def rank_main(a) -> int:
    import torch
    import torch.distributed as dist
    import torch.distributed.checkpoint as dcp

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(a.port), RANK=str(a.rank), WORLD_SIZE=str(a.ranks))
    dist.init_process_group("gloo", rank=a.rank, world_size=a.ranks)
    rank_bytes = int(a.gib * (1 << 30)) // a.ranks
    shapes = shard_shapes(rank_bytes)
    g = torch.Generator().manual_seed(a.rank)
    state = {f"rank{a.rank}.{name}": torch.randn(n, generator=g, dtype=torch.float32).to(torch.bfloat16)
             for name, n in shapes}
    nbytes = sum(t.numel() * t.element_size() for t in state.values())
    uri = a.uri

    def writer(uri):
        if a.method == "fjord":
            from fjord.torch import FjordStorageWriter
            return FjordStorageWriter(uri, overwrite=True, **fjord_options("BENCH_DCP_WRITER"))
        if a.method == "s3torchconnector":
            from s3torchconnector import S3ClientConfig
            from s3torchconnector.dcp import S3StorageWriter
            return S3StorageWriter(region="us-east-1", path=uri, s3client_config=S3ClientConfig(force_path_style=True),
                                   overwrite=True)
        if a.method == "s3fs":
            return dcp.FsspecWriter(uri, **s3fs_options(a))
        return dcp.FileSystemWriter(uri)

    def remove(uri):  # what a retention policy does to an old checkpoint (rank 0, the others wait)
        if a.rank != 0:
            return
        if a.method == "local":
            shutil.rmtree(uri, ignore_errors=True)
            return
        import fjord
        bucket, prefix = fjord.parse_uri(uri)
        c = fjord._client.default_client()
        c.delete_many(bucket, [e.key for e in c.list(bucket, prefix + "/")])

    def reader():
        if a.method == "fjord":
            from fjord.torch import FjordStorageReader
            return FjordStorageReader(uri, **fjord_options("BENCH_DCP_READER"))
        if a.method == "s3torchconnector":
            from s3torchconnector import S3ClientConfig
            from s3torchconnector.dcp import S3StorageReader
            return S3StorageReader(region="us-east-1", path=uri, s3client_config=S3ClientConfig(force_path_style=True))
        if a.method == "s3fs":
            return dcp.FsspecReader(uri, **s3fs_options(a))
        return dcp.FileSystemReader(uri)

    out = {"rank": a.rank, "bytes": nbytes}
    # Three saves, as a training run with a keep-the-last-one retention makes them: the first into fresh
    # space, a second beside it, then the first deleted and a third written (where the server can reuse
    # the space the deleted one freed). The loads read the third.
    for n, save_uri in enumerate([f"{uri}-1", f"{uri}-2", uri]):
        if n == 2:
            remove(f"{uri}-1")
        dist.barrier()
        t0, c0, s0 = time.monotonic(), cpu_seconds(), server_cpu()
        dcp.save(state, storage_writer=writer(save_uri))
        dist.barrier()
        out["fresh_save_s" if n == 0 else "save_s"] = time.monotonic() - t0
        out["save_cpu_s"], out["save_server_cpu_s"] = cpu_seconds() - c0, server_cpu() - s0
    remove(f"{uri}-2")
    if a.rank == 0:
        out["page_cache_dropped"] = drop_page_cache()
    dist.barrier()
    target = {k: torch.zeros_like(v) for k, v in state.items()}
    dist.barrier()
    t0, c0, s0 = time.monotonic(), cpu_seconds(), server_cpu()
    dcp.load(target, storage_reader=reader())
    dist.barrier()
    out["load_s"] = time.monotonic() - t0
    out["load_cpu_s"], out["load_server_cpu_s"] = cpu_seconds() - c0, server_cpu() - s0
    out["identical"] = all(torch.equal(target[k].view(torch.uint8), v.view(torch.uint8)) for k, v in state.items())
    del target
    if a.method == "fjord":
        # async_save twice with one writer: the first allocates the staging buffers (shared memory),
        # the second reuses them, as every save after a training run's first does.
        from fjord.torch import FjordStorageWriter
        writer_async = FjordStorageWriter(uri + "-async", overwrite=True)
        for attempt in ("first", "warm"):
            dist.barrier()
            t0 = time.monotonic()
            future = dcp.async_save(state, storage_writer=writer_async)
            out[f"async_{attempt}_blocked_s"] = time.monotonic() - t0
            future.result()
            dist.barrier()
            out[f"async_{attempt}_total_s"] = time.monotonic() - t0
        writer_async.close()
    print(json.dumps(out), flush=True)
    dist.destroy_process_group()
    return 0


def cpu_seconds(pid: int | None = None) -> float:
    """User + system CPU seconds of this process (all its threads), or of another one by pid."""
    if pid is None:
        t = os.times()
        return t.user + t.system
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def server_cpu() -> float:
    pid = os.environ.get("BENCH_SERVER_PID")
    return cpu_seconds(int(pid)) if pid else 0.0


def fjord_options(variable: str) -> dict:
    """Writer or reader options from the environment, e.g. BENCH_DCP_WRITER="objects_in_flight=8,in_flight=4"."""
    text = os.environ.get(variable, "")
    return {k: int(v) for k, v in (kv.split("=") for kv in text.split(",") if kv)}


def s3fs_options(a) -> dict:
    return {"key": os.environ["AWS_ACCESS_KEY_ID"], "secret": os.environ["AWS_SECRET_ACCESS_KEY"],
            "client_kwargs": {"endpoint_url": os.environ["AWS_ENDPOINT_URL"], "region_name": "us-east-1"}}


def drop_page_cache() -> bool:
    try:
        os.sync()
        with open("/proc/sys/vm/drop_caches", "w") as f:
            f.write("3\n")
        return True
    except OSError:
        return False


def free_port() -> int:
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_method(a, method: str) -> dict:
    if method == "local":
        uri = os.path.join(a.local_dir, "ckpt")
        shutil.rmtree(uri, ignore_errors=True)
    else:
        uri = f"s3://{a.bucket}/dcp-bench/{method}"
    port = free_port()
    procs = [subprocess.Popen([sys.executable, __file__, "rank", "--method", method, "--uri", uri, "--rank", str(r),
                               "--ranks", str(a.ranks), "--port", str(port), "--gib", str(a.gib)],
                              stdout=subprocess.PIPE, text=True) for r in range(a.ranks)]
    outs = []
    for p in procs:
        stdout, _ = p.communicate(timeout=3600)
        if p.returncode != 0:
            raise SystemExit(f"dcp_bench: {method} rank exited with {p.returncode}")
        outs.append(json.loads(stdout.strip().splitlines()[-1]))
    total = sum(o["bytes"] for o in outs)
    result = {"method": method, "bytes": total, "save_s": max(o["save_s"] for o in outs),
              "fresh_save_s": max(o["fresh_save_s"] for o in outs),
              "load_s": max(o["load_s"] for o in outs), "identical": all(o["identical"] for o in outs),
              "page_cache_dropped": outs[0].get("page_cache_dropped")}
    gib = total / (1 << 30)
    for phase in ("save", "load"):  # CPU seconds per GiB: all ranks together, and the server (rank 0's view)
        result[f"{phase}_rank_cpu_s_per_gib"] = sum(o[f"{phase}_cpu_s"] for o in outs) / gib
        result[f"{phase}_server_cpu_s_per_gib"] = outs[0][f"{phase}_server_cpu_s"] / gib
    result["save_gib_s"] = total / result["save_s"] / (1 << 30)
    result["fresh_save_gib_s"] = total / result["fresh_save_s"] / (1 << 30)
    result["load_gib_s"] = total / result["load_s"] / (1 << 30)
    if method == "fjord":
        for k in ("async_first_blocked_s", "async_first_total_s", "async_warm_blocked_s", "async_warm_total_s"):
            result[k] = max(o[k] for o in outs)
    if method == "local":
        shutil.rmtree(uri, ignore_errors=True)
    return result


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("mode", choices=["run", "rank"])
    p.add_argument("--endpoint")
    p.add_argument("--bucket", default="dcp-bench")
    p.add_argument("--local-dir")
    p.add_argument("--gib", type=float, default=4.0)
    p.add_argument("--ranks", type=int, default=4)
    p.add_argument("--methods", default=",".join(METHODS))
    p.add_argument("--json")
    p.add_argument("--method")
    p.add_argument("--uri")
    p.add_argument("--rank", type=int)
    p.add_argument("--port", type=int)
    a = p.parse_args()
    if a.mode == "rank":
        return rank_main(a)
    import fjord
    fjord.Client().create_bucket(a.bucket)
    results = []
    for method in a.methods.split(","):
        r = run_method(a, method)
        results.append(r)
        extra = (f"; async_save blocked {r['async_warm_blocked_s']:.2f} s (first {r['async_first_blocked_s']:.2f} s)"
                 if "async_warm_blocked_s" in r else "")
        print(f"{method:17s} save {r['save_gib_s']:.3f} GiB/s ({r['save_s']:.2f} s; first {r['fresh_save_gib_s']:.3f})  "
              f"load {r['load_gib_s']:.3f} GiB/s "
              f"({r['load_s']:.2f} s)  identical {r['identical']}{extra}", flush=True)
    if a.json:
        with open(a.json, "w") as f:
            json.dump(results, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
