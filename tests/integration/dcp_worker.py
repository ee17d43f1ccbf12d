"""One rank of a torch.distributed.checkpoint test (test_python_torch.py starts WORLD of these, as torchrun
would): gloo on CPU, DTensors sharded on dim 0 over a 1-D mesh, saved to and loaded from Fjord with
fjord.torch. Prints one JSON line with what it checked.

    dcp_worker.py ACTION URI --rank R --world W --port P
ACTION: save | load | save-no-collectives | load-no-collectives | save-hang-in-write |
        save-hang-before-commit | async-save-thread | async-save-process

The state dict is a function of the seed only (full tensors; each rank keeps its shard), so a load with
any world size knows every byte it must get back.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import sys
import time

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch.distributed.tensor import DTensor, Shard, distribute_tensor, init_device_mesh

import fjord
from fjord.torch import FjordStorageReader, FjordStorageWriter

SHAPES = {"layer0.weight": ((64, 1024), torch.float32), "layer1.weight": ((64, 2048), torch.bfloat16),
          "embed": ((128, 4096), torch.float32), "norm": ((64,), torch.float16)}


def full_tensors(seed: int) -> dict:
    g = torch.Generator().manual_seed(seed)
    out = {}
    for name, (shape, dtype) in SHAPES.items():
        out[name] = torch.randn(shape, generator=g).to(dtype)
    return out


def state_dict(mesh, seed: int, zeros: bool = False) -> dict:
    sd = {}
    for name, t in full_tensors(seed).items():
        sd[name] = distribute_tensor(torch.zeros_like(t) if zeros else t, mesh, [Shard(0)])
    sd["step"] = 0 if zeros else seed  # a non-tensor item (saved as bytes)
    sd["replicated"] = torch.zeros(16) if zeros else torch.arange(16, dtype=torch.float32) * seed
    return sd


def check(sd, seed: int) -> list[str]:
    bad = []
    for name, t in full_tensors(seed).items():
        got = sd[name]
        assert isinstance(got, DTensor)
        if not torch.equal(got.full_tensor().view(torch.uint8) if got.dtype != torch.float32 else got.full_tensor(),
                           t.view(torch.uint8) if t.dtype != torch.float32 else t):
            bad.append(name)
    if sd["step"] != seed:
        bad.append("step")
    if not torch.equal(sd["replicated"], torch.arange(16, dtype=torch.float32) * seed):
        bad.append("replicated")
    return bad


class GatedWriter(FjordStorageWriter):
    """Writes only once the file `gate` exists: the save cannot finish before the caller, back from
    async_save, opened the gate (a file, so that it works in the process executor's child too)."""

    def __init__(self, *args, gate: str, **kwargs):
        super().__init__(*args, **kwargs)
        self.gate = gate

    def write_data(self, plan, planner):
        deadline = time.monotonic() + 120
        while not os.path.exists(self.gate) and time.monotonic() < deadline:
            time.sleep(0.01)
        return super().write_data(plan, planner)


class HangInWrite(FjordStorageWriter):
    """Uploads half of this rank's items, says so, then waits to be killed."""

    def write_data(self, plan, planner):
        half = plan.items[: max(1, len(plan.items) // 2)]
        import dataclasses
        super().write_data(dataclasses.replace(plan, items=half), planner).wait()
        print(json.dumps({"state": "half-written"}), flush=True)
        time.sleep(3600)


class HangBeforeCommit(FjordStorageWriter):
    """Writes every item and says so (every rank), then the coordinator waits to be killed before it
    commits .metadata (the other ranks wait for it in DCP's collective)."""

    def write_data(self, plan, planner):
        done = super().write_data(plan, planner)
        done.wait()
        print(json.dumps({"state": "data-written"}), flush=True)
        return done

    def finish(self, metadata, results):
        time.sleep(3600)


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("action")
    p.add_argument("uri")
    p.add_argument("--rank", type=int, required=True)
    p.add_argument("--world", type=int, required=True)
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--gate", default="", help="async saves: the gate file's path (suffixed with the rank)")
    a = p.parse_args()
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(a.port), RANK=str(a.rank), WORLD_SIZE=str(a.world))
    dist.init_process_group("gloo", rank=a.rank, world_size=a.world, timeout=datetime.timedelta(seconds=120))
    mesh = init_device_mesh("cpu", (a.world,))
    client = fjord.Client()
    out = {"rank": a.rank}
    try:
        if a.action == "save":
            dcp.save(state_dict(mesh, a.seed), storage_writer=FjordStorageWriter(a.uri, client=client))
        elif a.action == "load":
            sd = state_dict(mesh, a.seed, zeros=True)
            dcp.load(sd, storage_reader=FjordStorageReader(a.uri, client=client))
            out["bad"] = check(sd, a.seed)
        elif a.action == "save-no-collectives":  # each rank saves its own shard, no coordination
            local = {k: v.to_local() if isinstance(v, DTensor) else v for k, v in state_dict(mesh, a.seed).items()}
            dcp.save(local, storage_writer=FjordStorageWriter(a.uri, client=client), use_collectives=False)
        elif a.action == "load-no-collectives":
            want = {k: v.to_local() if isinstance(v, DTensor) else v for k, v in state_dict(mesh, a.seed).items()}
            got = {k: torch.zeros_like(v) if isinstance(v, torch.Tensor) else 0 for k, v in want.items()}
            dcp.load(got, storage_reader=FjordStorageReader(a.uri, client=client))  # finds __{rank}.metadata
            out["bad"] = [k for k, v in want.items()
                          if not (torch.equal(got[k].view(torch.uint8), v.view(torch.uint8))
                                  if isinstance(v, torch.Tensor) else got[k] == v)]
        elif a.action == "save-hang-in-write":
            dcp.save(state_dict(mesh, a.seed), storage_writer=HangInWrite(a.uri, client=client))
        elif a.action == "save-hang-before-commit":
            dcp.save(state_dict(mesh, a.seed), storage_writer=HangBeforeCommit(a.uri, client=client))
        elif a.action in ("async-save-thread", "async-save-process"):
            from torch.distributed.checkpoint.state_dict_saver import AsyncCheckpointerType
            kind = AsyncCheckpointerType.PROCESS if a.action.endswith("process") else AsyncCheckpointerType.THREAD
            sd = state_dict(mesh, a.seed)
            gate = f"{a.gate}.{a.rank}"
            future = dcp.async_save(sd, storage_writer=GatedWriter(a.uri, client=client, gate=gate),
                                    async_checkpointer_type=kind)
            out["done_at_return"] = future.done()
            # The caller goes on training: change the live tensors. The checkpoint holds the staged values.
            for name in SHAPES:
                sd[name].to_local().fill_(0)
            open(gate, "w").close()
            future.result(timeout=300)
        else:
            raise SystemExit(f"unknown action {a.action}")
        dist.barrier()
    except BaseException as e:  # noqa: BLE001 - DCP raises CheckpointException, a BaseException
        out["error"] = f"{type(e).__name__}: {e}"
    finally:
        print(json.dumps(out), flush=True)
        try:
            client.close()
        except BaseException as e:  # noqa: BLE001 - the exit below must still happen
            print(f"client.close: {e!r}", file=sys.stderr)
        # A rank that failed leaves without tearing the process group down. DCP's failed collectives can
        # leave gloo work pending, and destroying the group (or the interpreter's exit destroying it)
        # with work pending aborts the process ("terminate called without an active exception"): a
        # barrier first did not prevent it on a loaded machine. os._exit runs no destructors; a peer
        # still in a collective with this rank gets a connection error, which is its own failure.
        if "error" in out:
            sys.stderr.flush()
            os._exit(0)
        dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
