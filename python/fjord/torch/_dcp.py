"""torch.distributed.checkpoint (DCP) on Fjord: FjordStorageWriter and FjordStorageReader.

A checkpoint id is an URI, s3://bucket/prefix (or fjord://bucket/prefix). Layout under the prefix:
  __{rank}_{save}_{n}.bin   one object per large tensor (at least small_item_bytes), its raw bytes as
                            they lie in memory (C order), sent from the tensor's memory by one PUT with
                            its CRC32C, which the server checks before storing (a multipart upload,
                            unchecked there, above 5 GiB); a window of them in flight per rank;
  __{rank}_{save}_small.bin the rank's small tensors and byte items packed together;
  .metadata                 torch's Metadata (pickled, as FileSystemWriter does), whose storage_data maps
                            every item to (object, offset, length, CRC32C, dtype, shape). It is written
                            last, by the coordinator, with If-None-Match: * : a save that did not finish
                            has no .metadata and does not load, and an existing checkpoint is never
                            overwritten unless overwrite=True.
`save` is a fresh random token per save, so a second save to the same id (overwrite=True) never
touches the objects the first one's .metadata names until its own .metadata replaced it; then the
first save's objects are deleted.

Loads read every item with parallel ranged GETs straight into the destination tensor when the item is
the whole destination (the usual case: same sharding); a resharded load reads the saved item into a
buffer and copies the overlapping part. Every item's CRC32C is checked before it is used: a damaged
or replaced object fails the load, it never yields wrong tensors.
"""

from __future__ import annotations

import dataclasses
import io
import pickle
import secrets
import threading
import weakref
from collections import deque
from typing import Any

import torch
from torch.distributed._shard._utils import narrow_tensor_by_index
from torch.distributed.checkpoint.metadata import Metadata, StorageMeta
from torch.distributed.checkpoint.planner import (
    LoadItemType,
    LoadPlan,
    LoadPlanner,
    SavePlan,
    SavePlanner,
    WriteItemType,
)
from torch.distributed.checkpoint.staging import AsyncStager, DefaultStager, StagingOptions
from torch.distributed.checkpoint.storage import StorageReader, StorageWriter, WriteResult
from torch.futures import Future

from .. import _errors
from .._client import Client, default_client
from .._memory import crc32c
from .._uri import parse_uri

METADATA = ".metadata"
MiB = 1 << 20
_MAX_SINGLE_PUT = 5 << 30  # S3's largest single PUT


@dataclasses.dataclass(frozen=True)
class FjordStorageInfo:
    """Where one item of a checkpoint lies: `key` (relative to the checkpoint prefix), `offset` and
    `length` in that object, the CRC32C of those bytes; for a tensor item its dtype name and shape."""

    key: str
    offset: int
    length: int
    crc32c: int
    dtype: str | None = None
    shape: tuple | None = None


@dataclasses.dataclass(frozen=True)
class _RankPrefix:
    rank: int
    token: str


def _checkpoint_location(checkpoint_id) -> tuple[str, str]:
    bucket, prefix = parse_uri(str(checkpoint_id))
    return bucket, prefix.strip("/")


def _dtype(name: str) -> torch.dtype:
    dtype = getattr(torch, name.removeprefix("torch."), None)
    if not isinstance(dtype, torch.dtype):
        raise ValueError(f"fjord: unknown dtype {name!r} in the checkpoint")
    return dtype


def _nbytes(t: torch.Tensor) -> int:
    return t.numel() * t.element_size()


def _tensors_in(obj) -> list:
    if isinstance(obj, torch.Tensor):
        return [obj]
    if isinstance(obj, dict):
        return [t for v in obj.values() for t in _tensors_in(v)]
    if isinstance(obj, (list, tuple)):
        return [t for v in obj for t in _tensors_in(v)]
    return []


def _resolved(futures: list) -> list:
    """Waits for every future; raises the first failure once all have ended (no request is left
    writing into memory the caller is about to free)."""
    results, first_error = [], None
    for f in futures:
        try:
            results.append(f.result())
        except BaseException as e:  # noqa: BLE001 - re-raised below
            first_error = first_error or e
            results.append(None)
    if first_error is not None:
        raise first_error
    return results


class _SaveState(threading.local):
    """What one save or load is doing: torch calls reset(checkpoint_id) and then the other methods on the
    same thread, and the thread executor runs each async_save on a thread of its own, so keeping this
    per thread lets one writer serve saves that overlap. A new thread starts from the defaults."""

    def __init__(self, defaults: dict):
        self.__dict__.update(defaults)


def _per_save(name: str):
    return property(lambda self: getattr(self._save, name), lambda self, v: setattr(self._save, name, v))


class _Location:
    checkpoint_id = _per_save("checkpoint_id")
    bucket = _per_save("bucket")
    prefix = _per_save("prefix")

    def __init__(self, checkpoint_id, client: Client | None, **per_save):
        self.client = client if client is not None else default_client()
        defaults = {"checkpoint_id": None, "bucket": "", "prefix": "", **per_save}
        if checkpoint_id is not None:
            defaults["bucket"], defaults["prefix"] = _checkpoint_location(checkpoint_id)
            defaults["checkpoint_id"] = str(checkpoint_id)
        self._defaults = defaults
        self._save = _SaveState(defaults)

    def __getstate__(self):  # pickled (the process executor): this thread's save, as the defaults
        state = dict(self.__dict__)
        state["_defaults"] = dict(self._save.__dict__)
        del state["_save"]
        return state

    def __setstate__(self, state):
        self.__dict__.update(state)
        self._save = _SaveState(self._defaults)

    def _locate(self, checkpoint_id) -> None:
        self.bucket, self.prefix = _checkpoint_location(checkpoint_id)
        self.checkpoint_id = str(checkpoint_id)

    def _key(self, name: str) -> str:
        return f"{self.prefix}/{name}" if self.prefix else name

    def _require_location(self) -> None:
        if self.checkpoint_id is None:
            raise ValueError("fjord: no checkpoint id (pass an s3://bucket/prefix as checkpoint_id)")


class FjordStorageWriter(_Location, StorageWriter, AsyncStager):
    """DCP StorageWriter that saves to Fjord (see the module docstring for the layout).

    client: a fjord.Client (default: one per process from the FJORD_* / AWS_* environment);
    overwrite: replace a checkpoint that exists at the id (default: refuse, before any data is sent);
    small_item_bytes: tensors smaller than this are packed into one object per rank;
    objects_in_flight: uploads of a rank at once; part_size / in_flight: the parts of each large tensor
    (the client's defaults: 16 MiB parts, 8 at once).
    With use_collectives=False (dcp.save's option) every rank commits its own __{rank}.metadata.

    As an AsyncStager (dcp.async_save uses it): stage() copies the state dict to CPU memory with torch's
    DefaultStager, synchronously: with CUDA into pinned memory with non-blocking copies (fast DMA), without
    CUDA into plain memory. stage_shared puts the staging buffers in shared memory, which saves a copy when
    the process executor hands them to its child (they then live in /dev/shm). The buffers are reused by
    the next save of this writer once the previous save's data was written (in this process); while a
    previous save may still read them, a save gets new ones.
    """

    is_coordinator = _per_save("is_coordinator")
    rank = _per_save("rank")
    use_collectives = _per_save("use_collectives")
    save_id = _per_save("save_id")

    def __init__(
        self,
        checkpoint_id=None,
        *,
        client: Client | None = None,
        overwrite: bool = False,
        small_item_bytes: int = 4 * MiB,
        objects_in_flight: int = 4,
        part_size: int | None = None,
        in_flight: int | None = None,
        stage_shared: bool = False,
    ):
        _Location.__init__(
            self, checkpoint_id, client, is_coordinator=True, rank=0, use_collectives=True, save_id=secrets.token_hex(8)
        )
        if objects_in_flight < 1:
            raise ValueError("objects_in_flight must be at least 1")
        self.objects_in_flight = objects_in_flight
        self.overwrite = overwrite
        self.small_item_bytes = small_item_bytes
        self.part_size = part_size
        self.in_flight = in_flight
        self.stage_shared = stage_shared
        self._stager: DefaultStager | None = None
        self._staged: list = []  # weak references to the tensors the last stage() returned

    def __getstate__(self):  # the process executor pickles the writer: not its staging buffers
        state = _Location.__getstate__(self)
        state["_stager"] = None
        state["_staged"] = []
        return state

    def __del__(self):
        try:
            self.close()
        except Exception:  # noqa: BLE001 - at interpreter exit torch may be half gone
            pass

    # -- StorageWriter -------------------------------------------------------------------------------

    def reset(self, checkpoint_id=None) -> None:
        if checkpoint_id is not None:
            self._locate(checkpoint_id)
        self.save_id = secrets.token_hex(8)
        self.use_collectives = True

    @classmethod
    def validate_checkpoint_id(cls, checkpoint_id) -> bool:
        try:
            _checkpoint_location(checkpoint_id)
            return True
        except ValueError:
            return False

    def storage_meta(self) -> StorageMeta | None:
        return StorageMeta(checkpoint_id=self.checkpoint_id, save_id=self.save_id)

    def _metadata_key(self) -> str:
        return self._key(METADATA if self.use_collectives else f"__{self.rank}{METADATA}")

    def set_up_storage_writer(self, is_coordinator: bool, *args: Any, **kwargs: Any) -> None:
        self._require_location()
        self.is_coordinator = is_coordinator
        self.rank = kwargs.get("rank", 0) or 0
        self.use_collectives = kwargs.get("use_collectives", True)
        if is_coordinator or not self.use_collectives:
            self._check_target()

    def _check_target(self) -> None:
        """Fails before any data moves: a missing bucket or refused credentials (named by the error),
        or an existing checkpoint when overwrite is off."""
        key = self._metadata_key()
        objects, _, _ = self.client.list_page(self.bucket, key, max_keys=1)
        if objects and objects[0].key == key and not self.overwrite:
            raise FileExistsError(
                f"fjord: a checkpoint already exists at {self.checkpoint_id} (pass overwrite=True to replace it)"
            )

    def prepare_local_plan(self, plan: SavePlan) -> SavePlan:
        if not self.use_collectives:  # no global plan: each rank names its own objects
            return dataclasses.replace(plan, storage_data=_RankPrefix(self.rank, secrets.token_hex(6)))
        return plan

    def prepare_global_plan(self, plans: list[SavePlan]) -> list[SavePlan]:
        token = secrets.token_hex(6)
        return [dataclasses.replace(p, storage_data=_RankPrefix(i, token)) for i, p in enumerate(plans)]

    def write_data(self, plan: SavePlan, planner: SavePlanner) -> Future:
        fut: Future = Future()
        fut.set_result(self._write(plan, planner))
        return fut

    def _write(self, plan: SavePlan, planner: SavePlanner) -> list[WriteResult]:
        prefix = plan.storage_data
        if not isinstance(prefix, _RankPrefix):  # a plan that did not pass prepare_global_plan
            prefix = _RankPrefix(self.rank, secrets.token_hex(6))
        base = f"__{prefix.rank}_{prefix.token}"
        small, large = [], []
        for item in plan.items:
            data = planner.resolve_data(item)
            if item.type == WriteItemType.BYTE_IO:
                small.append((item, bytes(data.getbuffer()), None))
                continue
            t = data.detach().resolve_conj().resolve_neg()
            if t.device.type != "cpu":
                t = t.to("cpu")
            if not t.is_contiguous():
                t = t.contiguous()
            (large if _nbytes(t) >= self.small_item_bytes else small).append((item, t, t))

        uploads, results = [], []
        try:
            for n, (item, t, _) in enumerate(large):
                name = f"{base}_{n}.bin"
                # The CRC32C goes with the PUT: the server checks the bytes it stores against it, so a
                # tensor damaged on its way fails the save instead of committing. It is computed while
                # the previous uploads run. A tensor over 5 GiB goes as a multipart upload, unchecked
                # by the server (its CRC is still checked on load).
                crc = crc32c(t)
                if len(uploads) >= self.objects_in_flight:
                    uploads[len(uploads) - self.objects_in_flight].result()  # a window of uploads at once
                single = _nbytes(t) <= _MAX_SINGLE_PUT
                uploads.append(
                    self.client.put_async(
                        self.bucket,
                        self._key(name),
                        t,
                        crc32c=crc if single else None,
                        part_size=self.part_size,
                        in_flight=self.in_flight,
                    )
                )
                info = FjordStorageInfo(name, 0, _nbytes(t), crc, str(t.dtype), tuple(t.shape))
                results.append(WriteResult(index=item.index, size_in_bytes=_nbytes(t), storage_data=info))
            pack_name = f"{base}_small.bin"
            packed, pack = [], None
            if small:
                total = sum(len(d) if t is None else _nbytes(t) for _, d, t in small)
                pack = bytearray(total)
                view, offset = memoryview(pack), 0
                for item, d, t in small:
                    raw = memoryview(d) if t is None else memoryview(t.reshape(-1).view(torch.uint8).numpy())
                    view[offset : offset + len(raw)] = raw.cast("B")
                    packed.append((item, offset, len(raw), t))
                    offset += len(raw)
                uploads.append(
                    self.client.put_async(
                        self.bucket,
                        self._key(pack_name),
                        pack,
                        crc32c=crc32c(pack) if len(pack) <= _MAX_SINGLE_PUT else None,
                    )
                )
            for item, offset, length, t in packed:
                crc = crc32c(memoryview(pack)[offset : offset + length])
                info = FjordStorageInfo(
                    pack_name,
                    offset,
                    length,
                    crc,
                    None if t is None else str(t.dtype),
                    None if t is None else tuple(t.shape),
                )
                results.append(WriteResult(index=item.index, size_in_bytes=length, storage_data=info))
        finally:
            _resolved(uploads)  # every upload ends before this returns or raises
        return results

    def finish(self, metadata: Metadata, results: list[list[WriteResult]]) -> None:
        storage_md = {}
        for rank_results in results:
            storage_md.update({wr.index: wr.storage_data for wr in rank_results})
        metadata.storage_data = storage_md
        metadata.storage_meta = self.storage_meta()
        blob = pickle.dumps(metadata)
        key = self._metadata_key()
        if self.overwrite:
            replaced = self._objects_of(key)
            self.client.put(self.bucket, key, blob)
            stale = replaced - {self._key(info.key) for info in storage_md.values()}
            if stale:  # exactly the replaced checkpoint's own objects that this one does not reuse
                self.client.delete_many(self.bucket, sorted(stale))
            return
        try:
            self.client.put(self.bucket, key, blob, if_none_match="*")
        except _errors.PreconditionFailed:
            # Either another save committed first, or a retry of ours found our own first attempt.
            if self.client.get(self.bucket, key) != blob:
                raise FileExistsError(
                    f"fjord: another save committed a checkpoint at {self.checkpoint_id} "
                    "first; this save's data is not referenced"
                ) from None

    def _objects_of(self, metadata_key: str) -> set[str]:
        """The keys a committed checkpoint's metadata names (none if there is none, or it is unreadable)."""
        try:
            old = pickle.loads(self.client.get(self.bucket, metadata_key))
        except (_errors.NoSuchKey, pickle.UnpicklingError, EOFError, AttributeError):
            return set()
        return {self._key(info.key) for info in (old.storage_data or {}).values() if isinstance(info, FjordStorageInfo)}

    # -- AsyncStager ---------------------------------------------------------------------------------

    @property
    def should_synchronize_after_execute(self) -> bool:
        return True

    def _staged_alive(self) -> bool:
        return any(ref() is not None for ref in self._staged)

    def stage(self, state_dict):
        if self._stager is not None and self._staged_alive():
            # A previous save still holds the tensors staged for it (its upload runs, here or in the
            # process executor's child): never overwrite those buffers, stage into new ones. Once that
            # save let go of its tensors, the buffers are reused.
            self._stager = None
        if self._stager is None:
            cuda = torch.cuda.is_available()
            self._stager = DefaultStager(
                StagingOptions(
                    use_pinned_memory=cuda,
                    use_shared_memory=self.stage_shared,
                    use_async_staging=False,
                    use_non_blocking_copy=cuda,
                )
            )
        staged = self._stager.stage(state_dict)
        self._staged = [weakref.ref(t) for t in _tensors_in(staged)]
        return staged

    def synchronize_staging(self) -> None:
        pass  # stage() is synchronous

    def close(self) -> None:
        if self._stager is not None and not self._staged_alive():
            self._stager.close()
        self._stager = None


class FjordStorageReader(_Location, StorageReader):
    """DCP StorageReader for checkpoints written by FjordStorageWriter.

    verify: check every item's CRC32C (default on); items_in_flight: reads of a rank at once; in_flight:
    ranged GETs per item (and range_size their size; the client's defaults: 16 MiB, 8 at once); buffer_bytes:
    the most memory held at once in read buffers for items that are not read straight into their
    destination (resharded loads, other dtypes). A saved chunk that several destination pieces overlap is
    read once.
    """

    storage_data = _per_save("storage_data")
    load_id = _per_save("load_id")

    def __init__(
        self,
        checkpoint_id=None,
        *,
        client: Client | None = None,
        verify: bool = True,
        items_in_flight: int = 8,
        in_flight: int | None = None,
        range_size: int | None = None,
        buffer_bytes: int = 1 << 30,
    ):
        _Location.__init__(self, checkpoint_id, client, storage_data={}, load_id=secrets.token_hex(8))
        if items_in_flight < 1:
            raise ValueError("items_in_flight must be at least 1")
        self.items_in_flight = items_in_flight
        self.range_size = range_size
        self.verify = verify
        self.in_flight = in_flight
        self.buffer_bytes = buffer_bytes

    def reset(self, checkpoint_id=None) -> None:
        if checkpoint_id is not None:
            self._locate(checkpoint_id)
        self.storage_data = {}
        self.load_id = secrets.token_hex(8)

    @classmethod
    def validate_checkpoint_id(cls, checkpoint_id) -> bool:
        return FjordStorageWriter.validate_checkpoint_id(checkpoint_id)

    def read_metadata(self, *args: Any, **kwargs: Any) -> Metadata:
        self._require_location()
        rank = kwargs.get("rank")
        name = METADATA if rank is None else f"__{rank}{METADATA}"
        try:
            blob = self.client.get(self.bucket, self._key(name))
        except _errors.NoSuchKey:
            raise _errors.NoSuchKey(
                f"fjord: no checkpoint at {self.checkpoint_id}: its {name} does not exist "
                "(never saved there, or a save that did not finish)"
            ) from None
        metadata = pickle.loads(blob)
        if getattr(metadata, "storage_meta", None) is None:
            metadata.storage_meta = StorageMeta()
        metadata.storage_meta.load_id = self.load_id
        return metadata

    def set_up_storage_reader(self, metadata: Metadata, is_coordinator: bool, *args: Any, **kwargs: Any) -> None:
        self.storage_data = metadata.storage_data or {}

    def prepare_local_plan(self, plan: LoadPlan) -> LoadPlan:
        return plan

    def prepare_global_plan(self, plans: list[LoadPlan]) -> list[LoadPlan]:
        return plans

    def _info(self, req) -> FjordStorageInfo:
        info = self.storage_data.get(req.storage_index)
        if not isinstance(info, FjordStorageInfo):
            raise ValueError(
                f"fjord: {self.checkpoint_id} was not written by FjordStorageWriter "
                f"(item {req.storage_index} has no Fjord location)"
            )
        return info

    def read_data(self, plan: LoadPlan, planner: LoadPlanner) -> Future:
        """Starts reads while at most buffer_bytes are buffered, finishes them in order. Items that
        share a saved chunk (a resharded load) wait for one read of it."""
        window: deque = deque()
        chunks: dict = {}  # (key, offset) -> [buffer, future, verified, readers left]
        users: dict = {}
        for req in plan.items:
            info = self._info(req)
            users[(info.key, info.offset)] = users.get((info.key, info.offset), 0) + 1
        buffered = 0
        try:
            for req in plan.items:
                entry = self._start_read(req, self._info(req), planner, chunks, users)
                window.append(entry)
                buffered += entry[5]
                while (buffered > self.buffer_bytes or len(window) >= self.items_in_flight) and len(window) > 1:
                    buffered -= self._finish_read(window.popleft(), planner, chunks)
            while window:
                self._finish_read(window.popleft(), planner, chunks)
        finally:
            for entry in window:  # after a failure: every read ends before its memory may go
                try:
                    entry[3].result()
                except BaseException:  # noqa: BLE001 - the first failure is the one raised
                    pass
        fut: Future = Future()
        fut.set_result(None)
        return fut

    def _start_read(self, req, info: FjordStorageInfo, planner: LoadPlanner, chunks: dict, users: dict):
        """Starts the item's read: (req, info, destination, future, chunk key or None, bytes buffered,
        target)."""
        if req.type == LoadItemType.BYTE_IO:
            dest, target = bytearray(info.length), None
        else:
            target = planner.resolve_tensor(req).detach()
            dtype = _dtype(info.dtype)
            whole = all(o == 0 for o in req.storage_offsets) and tuple(req.lengths) == tuple(info.shape)
            direct = (
                whole
                and target.device.type == "cpu"
                and target.is_contiguous()
                and target.dtype == dtype
                and _nbytes(target) == info.length
            )
            if direct:
                future = self.client.get_into_async(
                    self.bucket,
                    self._key(info.key),
                    target,
                    offset=info.offset,
                    exact=True,
                    in_flight=self.in_flight,
                    range_size=self.range_size,
                )
                return (req, info, target, future, None, 0, target)
            chunk_key = (info.key, info.offset)
            chunk = chunks.get(chunk_key)
            if chunk is None:
                buffer = torch.empty(info.shape, dtype=dtype)
                future = self.client.get_into_async(
                    self.bucket,
                    self._key(info.key),
                    buffer,
                    offset=info.offset,
                    exact=True,
                    in_flight=self.in_flight,
                    range_size=self.range_size,
                )
                chunk = chunks[chunk_key] = [buffer, future, False, users[chunk_key]]
                return (req, info, buffer, future, chunk_key, info.length, target)
            return (req, info, chunk[0], chunk[1], chunk_key, 0, target)
        future = self.client.get_into_async(
            self.bucket,
            self._key(info.key),
            dest,
            offset=info.offset,
            exact=True,
            in_flight=self.in_flight,
            range_size=self.range_size,
        )
        return (req, info, dest, future, None, info.length, None)

    def _finish_read(self, entry, planner: LoadPlanner, chunks: dict) -> int:
        """Checks and delivers one item; returns the bytes of buffer it let go."""
        req, info, dest, future, chunk_key, buffered, target = entry
        got = future.result()
        chunk = chunks.get(chunk_key) if chunk_key is not None else None
        if chunk is None or not chunk[2]:
            where = f"{self.checkpoint_id}/{info.key} at {info.offset}"
            if got != info.length:
                raise _errors.Error(f"fjord: short read of {where}: {got} of {info.length} bytes")
            if self.verify and crc32c(dest) != info.crc32c:
                raise _errors.Error(
                    f"fjord: checksum mismatch in {where} ({info.length} bytes): the checkpoint is "
                    "damaged or was replaced; the load failed (tensors read straight into their "
                    "destination may hold the bad bytes)"
                )
            if chunk is not None:
                chunk[2] = True
        if target is None:
            planner.load_bytes(req, io.BytesIO(dest))
            return buffered
        if dest is not target:
            target.copy_(narrow_tensor_by_index(dest, req.storage_offsets, req.lengths))
        planner.commit_tensor(req, target)
        if chunk is not None:
            chunk[3] -= 1
            if chunk[3] == 0:
                del chunks[chunk_key]  # the buffer goes once its last reader is done
        return buffered
