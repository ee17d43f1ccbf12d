"""s3:// and fjord:// URIs."""

from __future__ import annotations

SCHEMES = ("s3://", "fjord://")


def parse_uri(uri: str) -> tuple[str, str]:
    """("bucket", "key/or/prefix") of "s3://bucket/key/or/prefix" (or fjord://). The key may be empty."""
    text = str(uri)
    for scheme in SCHEMES:
        if text.startswith(scheme):
            rest = text[len(scheme) :]
            break
    else:
        raise ValueError(f"not an s3:// or fjord:// URI: {text!r}")
    bucket, _, key = rest.partition("/")
    if not bucket:
        raise ValueError(f"no bucket in {text!r}")
    return bucket, key
