"""safetensors files in Fjord, written and read by the native client.

The format (https://huggingface.co/docs/safetensors): an 8-byte little-endian header length, a JSON
header {name: {"dtype", "shape", "data_offsets": [begin, end]}, "__metadata__": {str: str}} padded
with spaces to a multiple of 8, then the tensors' bytes (C order, little-endian). It is written here
by hand because the safetensors package reads and writes local files and bytes only: Fjord reads a
file's header with one ranged GET and then each tensor with ranged GETs straight into its tensor, so a
caller can open a multi-GiB file and load only the tensors it needs (`safe_open`).
"""

from __future__ import annotations

import json
import struct

import torch

from .. import _errors
from .._client import Client, default_client
from .._uri import parse_uri

_DTYPES = {
    torch.float64: "F64",
    torch.float32: "F32",
    torch.float16: "F16",
    torch.bfloat16: "BF16",
    torch.int64: "I64",
    torch.int32: "I32",
    torch.int16: "I16",
    torch.int8: "I8",
    torch.uint8: "U8",
    torch.bool: "BOOL",
    torch.uint16: "U16",
    torch.uint32: "U32",
    torch.uint64: "U64",
    torch.float8_e4m3fn: "F8_E4M3",
    torch.float8_e5m2: "F8_E5M2",
}
_BY_NAME = {v: k for k, v in _DTYPES.items()}
_MAX_HEADER = 100 << 20  # as the safetensors package limits it


def save_safetensors(tensors: dict, uri: str, *, metadata: dict | None = None, client: Client | None = None) -> None:
    """Writes the tensors (CPU or not; copied to CPU) as one safetensors object."""
    client = client if client is not None else default_client()
    bucket, key = parse_uri(uri)
    header: dict = {}
    if metadata:
        header["__metadata__"] = {str(k): str(v) for k, v in metadata.items()}
    prepared, offset = [], 0
    for name in sorted(tensors):
        t = tensors[name].detach()
        if t.dtype not in _DTYPES:
            raise ValueError(f"fjord.torch.save_safetensors: {name}: dtype {t.dtype} has no safetensors name")
        t = t.to("cpu").contiguous()
        n = t.numel() * t.element_size()
        header[name] = {"dtype": _DTYPES[t.dtype], "shape": list(t.shape), "data_offsets": [offset, offset + n]}
        prepared.append((t, offset, n))
        offset += n
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    out = bytearray(8 + len(text) + offset)
    out[:8] = struct.pack("<Q", len(text))
    out[8 : 8 + len(text)] = text
    body = memoryview(out)[8 + len(text) :]
    for t, begin, n in prepared:
        if n:
            body[begin : begin + n] = memoryview(t.reshape(-1).view(torch.uint8).numpy())
    client.put(bucket, key, out)


class SafetensorsObject:
    """An open safetensors object: keys(), metadata(), get_tensor(name) (one ranged read each)."""

    def __init__(self, uri: str, client: Client | None = None):
        self.client = client if client is not None else default_client()
        self.uri = uri
        self.bucket, self.key = parse_uri(uri)
        first = bytearray(64 << 10)
        got = self.client.get_into(self.bucket, self.key, first)
        if got < 8:
            raise _errors.Error(f"fjord: {uri} is not a safetensors file ({got} bytes)")
        (length,) = struct.unpack("<Q", first[:8])
        if length > _MAX_HEADER or (8 + length > got and got < len(first)):
            raise _errors.Error(f"fjord: {uri}: bad safetensors header length {length} ({got} bytes in all)")
        if 8 + length <= got:
            raw = bytes(first[8 : 8 + length])
        else:
            rest = bytearray(8 + length - got)
            if self.client.get_into(self.bucket, self.key, rest, offset=got, exact=True) != len(rest):
                raise _errors.Error(f"fjord: {uri}: the safetensors header is cut short")
            raw = bytes(first[8:got]) + bytes(rest)
        try:
            header = json.loads(raw)
        except ValueError as e:
            raise _errors.Error(f"fjord: {uri}: the safetensors header is not JSON: {e}") from None
        self._metadata = header.pop("__metadata__", None)
        self._entries = header
        self._data_start = 8 + length

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return None

    def keys(self) -> list[str]:
        return list(self._entries)

    def metadata(self) -> dict | None:
        return self._metadata

    def _empty(self, name: str):
        entry = self._entries[name]
        dtype = _BY_NAME.get(entry["dtype"])
        if dtype is None:
            raise ValueError(f"fjord: {self.uri}: {name} has dtype {entry['dtype']}, which torch lacks")
        begin, end = entry["data_offsets"]
        t = torch.empty(entry["shape"], dtype=dtype)
        if t.numel() * t.element_size() != end - begin:
            raise _errors.Error(f"fjord: {self.uri}: {name}'s offsets do not match its shape and dtype")
        return t, begin, end

    def get_tensor(self, name: str) -> torch.Tensor:
        t, begin, end = self._empty(name)
        if end > begin:
            got = self.client.get_into(self.bucket, self.key, t, offset=self._data_start + begin, exact=True)
            if got != end - begin:
                raise _errors.Error(f"fjord: {self.uri}: {name} is cut short")
        return t

    def get_tensors(self, names=None) -> dict:
        """Several tensors, all read at once (parallel ranged reads into each tensor)."""
        names = self.keys() if names is None else list(names)
        out, futures = {}, []
        for name in names:
            t, begin, end = self._empty(name)
            out[name] = t
            if end > begin:
                futures.append(
                    (
                        name,
                        end - begin,
                        self.client.get_into_async(
                            self.bucket, self.key, t, offset=self._data_start + begin, exact=True
                        ),
                    )
                )
        errors = []
        for name, n, f in futures:
            try:
                if f.result() != n:
                    errors.append(f"{name} is cut short")
            except _errors.Error as e:
                errors.append(str(e))
        if errors:
            raise _errors.Error(f"fjord: {self.uri}: " + "; ".join(errors))
        return out


def safe_open(uri: str, framework: str = "pt", *, client: Client | None = None) -> SafetensorsObject:
    """Like safetensors.safe_open, for an object: reads the header now and each tensor when asked."""
    if framework not in ("pt", "torch"):
        raise ValueError("fjord.torch.safe_open: framework must be 'pt'")
    return SafetensorsObject(uri, client)


def load_safetensors(uri: str, *, client: Client | None = None) -> dict:
    """Every tensor of a safetensors object, read in parallel straight into the tensors."""
    return SafetensorsObject(uri, client).get_tensors()
