"""Framing and the plain-data codec used across every sandbox process boundary.

The trusted side only ever turns bytes from the untrusted process into genuine built-in values
(``None``, bool, int, float, complex, str, bytes, list, tuple, dict, set, frozenset) or opaque handles.
Nothing is unpickled or evaluated, so the model cannot hand the tests an object with its own
``__eq__``. Containers are tagged because JSON has no tuple, set, bytes or non-string keys.
"""

from __future__ import annotations

import base64
import json
import os
import struct

FRAME_HEADER = struct.Struct("!I")
MAX_FRAME_BYTES = 64 * 1024 * 1024


class WireError(Exception):
    """A frame or value that cannot be decoded: the sender broke the protocol."""


class PeerClosed(WireError):
    """The other end closed the channel (usually: the process died)."""


def read_exact(fd: int, count: int) -> bytes:
    chunks = []
    remaining = count
    while remaining:
        chunk = os.read(fd, min(remaining, 1 << 20))
        if not chunk:
            raise PeerClosed(f"channel closed with {remaining} of {count} bytes still expected")
        chunks.append(chunk)
        remaining -= len(chunk)
    return b"".join(chunks)


def write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        view = view[written:]


def send_frame(fd: int, payload: bytes) -> None:
    write_all(fd, FRAME_HEADER.pack(len(payload)) + payload)


def recv_frame(fd: int, limit: int = MAX_FRAME_BYTES) -> bytes:
    (length,) = FRAME_HEADER.unpack(read_exact(fd, FRAME_HEADER.size))
    if length > limit:
        raise WireError(f"frame of {length} bytes exceeds the {limit}-byte limit")
    return read_exact(fd, length)


def send_json(fd: int, obj) -> None:
    send_frame(fd, json.dumps(obj, separators=(",", ":")).encode())


def recv_json(fd: int, limit: int = MAX_FRAME_BYTES):
    raw = recv_frame(fd, limit)
    try:
        return json.loads(raw)
    except (ValueError, RecursionError) as exc:
        raise WireError(f"frame is not valid JSON: {exc}") from None


# --- plain-data codec ------------------------------------------------------------------------------
# Encoded form: JSON scalars stand for themselves (bool/int/float/str/None); every container and
# every other type is a one-key object: {"l": [...]}, {"t": [...]}, {"d": [[k, v], ...]}, {"s": [...]},
# {"fs": [...]}, {"b": base64}, {"ba": base64}, {"c": [re, im]}, {"h": handle id}.

_SCALARS = (type(None), bool, int, float, str)


class Unencodable(TypeError):
    """A value with no plain-data form and no handle table to fall back on."""


def encode(value, make_handle=None, _depth: int = 0):
    """Turn ``value`` into a JSON-able tree. ``make_handle(obj) -> int`` receives non-plain objects.

    Subclasses of built-in containers and scalars (``Counter``, ``namedtuple``, ``IntEnum``) become
    their base type, which is how they compare in-process too.
    """
    if _depth > 200:
        raise Unencodable("value is nested more than 200 levels deep")
    kind = type(value)
    if kind in _SCALARS:
        return value
    depth = _depth + 1
    if isinstance(value, bool):
        return bool(value)
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float):
        return float(value)
    if isinstance(value, str):
        return str(value)
    if isinstance(value, list):
        return {"l": [encode(item, make_handle, depth) for item in list.__iter__(value)]}
    if isinstance(value, tuple):
        return {"t": [encode(item, make_handle, depth) for item in tuple.__iter__(value)]}
    if isinstance(value, dict):
        return {"d": [[encode(k, make_handle, depth), encode(v, make_handle, depth)] for k, v in dict.items(value)]}
    if isinstance(value, frozenset):
        return {"fs": [encode(item, make_handle, depth) for item in frozenset.__iter__(value)]}
    if isinstance(value, set):
        return {"s": [encode(item, make_handle, depth) for item in set.__iter__(value)]}
    if isinstance(value, bytes):
        return {"b": base64.b64encode(bytes(value)).decode()}
    if isinstance(value, bytearray):
        return {"ba": base64.b64encode(bytes(value)).decode()}
    if isinstance(value, complex):
        return {"c": [complex(value).real, complex(value).imag]}
    if make_handle is None:
        raise Unencodable(f"a {kind.__name__} cannot cross the sandbox boundary as plain data")
    return {"h": make_handle(value)}


def decode(tree, resolve_handle=None, _depth: int = 0):
    """Inverse of :func:`encode`; builds only built-in types. ``resolve_handle(id)`` maps handles."""
    if _depth > 200:
        raise WireError("value is nested more than 200 levels deep")
    kind = type(tree)
    if kind in _SCALARS:
        return tree
    if kind is not dict or len(tree) != 1:
        raise WireError(f"malformed value of type {kind.__name__}")
    (tag, body), = tree.items()
    depth = _depth + 1
    try:
        if tag == "l":
            return [decode(item, resolve_handle, depth) for item in _as_list(body)]
        if tag == "t":
            return tuple(decode(item, resolve_handle, depth) for item in _as_list(body))
        if tag == "d":
            result = {}
            for pair in _as_list(body):
                key, val = _as_list(pair)
                result[decode(key, resolve_handle, depth)] = decode(val, resolve_handle, depth)
            return result
        if tag == "s":
            return {decode(item, resolve_handle, depth) for item in _as_list(body)}
        if tag == "fs":
            return frozenset(decode(item, resolve_handle, depth) for item in _as_list(body))
        if tag == "b":
            return base64.b64decode(_as_str(body), validate=True)
        if tag == "ba":
            return bytearray(base64.b64decode(_as_str(body), validate=True))
        if tag == "c":
            real, imag = _as_list(body)
            return complex(float(real), float(imag))
        if tag == "h":
            if resolve_handle is None or type(body) is not int:
                raise WireError("unexpected object handle")
            return resolve_handle(body)
    except WireError:
        raise
    except (TypeError, ValueError) as exc:  # unhashable key, bad base64, wrong arity
        raise WireError(f"malformed {tag!r} value: {exc}") from None
    raise WireError(f"unknown value tag {tag!r}")


def _as_list(body):
    if type(body) is not list:
        raise WireError("expected a list")
    return body


def _as_str(body):
    if type(body) is not str:
        raise WireError("expected a string")
    return body
