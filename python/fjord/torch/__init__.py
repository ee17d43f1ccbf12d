"""PyTorch on Fjord.

Distributed checkpoints (torch.distributed.checkpoint):

    import torch.distributed.checkpoint as dcp
    from fjord.torch import FjordStorageWriter, FjordStorageReader
    dcp.save(state_dict, storage_writer=FjordStorageWriter("s3://ckpt/run1/step100"))
    dcp.load(state_dict, storage_reader=FjordStorageReader("s3://ckpt/run1/step100"))
    dcp.async_save(state_dict, storage_writer=FjordStorageWriter("s3://ckpt/run1/step200"))

One-process helpers: save/load (torch.save format), save_safetensors/load_safetensors/safe_open.
"""

from __future__ import annotations

import io

import torch

from .._client import Client, default_client
from .._uri import parse_uri
from ._dcp import FjordStorageInfo, FjordStorageReader, FjordStorageWriter
from ._safetensors import load_safetensors, safe_open, save_safetensors

__all__ = [
    "FjordStorageWriter",
    "FjordStorageReader",
    "FjordStorageInfo",
    "save",
    "load",
    "save_safetensors",
    "load_safetensors",
    "safe_open",
]


def save(obj, uri: str, *, client: Client | None = None) -> None:
    """torch.save(obj) to s3://bucket/key (serialized in memory, then one parallel upload)."""
    client = client if client is not None else default_client()
    bucket, key = parse_uri(uri)
    if not key:
        raise ValueError(f"fjord.torch.save: {uri!r} names no key")
    buffer = io.BytesIO()
    torch.save(obj, buffer)
    view = buffer.getbuffer()
    try:
        client.put(bucket, key, view)
    finally:
        view.release()


def load(uri: str, *, client: Client | None = None, map_location=None, weights_only: bool = True):
    """torch.load of an object saved with save() (or any torch.save file in the store)."""
    client = client if client is not None else default_client()
    bucket, key = parse_uri(uri)
    return torch.load(io.BytesIO(client.get(bucket, key)), map_location=map_location, weights_only=weights_only)
