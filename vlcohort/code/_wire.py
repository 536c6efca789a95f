"""Plain data across a process boundary: the only thing a candidate program can hand back.

Standard library only. The host imports this module; the two sandboxed scripts
(``_harness.py``, ``_server.py``) are sent with this file's text in front of them.

Why plain data: a value that crosses from the candidate to the process that judges it
must not carry the candidate's code with it. An object whose ``__eq__`` always answers
True, a ``str`` subclass that lies, a generator: none of them exists on the judging side,
only the builtin value they hold. The encoding is tagged JSON, never pickle and never
``eval`` of candidate text:

    None / bool / str / int (|x| < 2**53) / finite float -> the JSON value itself
    {"I": hex} big int   {"F": "inf" | "-inf" | "nan"}   {"c": [re, im]} complex
    {"b": hex} bytes     {"ba": hex} bytearray
    {"l": [...]} list    {"t": [...]} tuple   {"s": [...]} set   {"f": [...]} frozenset
    {"d": [[k, v], ...]} dict

A subclass of one of these types is sent as the base type's own content, read through
the base type's methods (``str.__str__``, ``dict.items``, ...), so its overrides of
``__eq__`` / ``__iter__`` / ``__int__`` are never consulted. Anything else is
:class:`NotPlain`. Depth is capped (a list that contains itself is not plain data).

Frames are one JSON object per line (ASCII: ``ensure_ascii``), read with a deadline and a
size cap, written without blocking past a deadline, so that a peer that hangs, floods or
dies can never block the reader forever.
"""

import json
import math
import os
import select
import time

#: Nesting deeper than this is refused (a self-containing list, a recursion bomb).
MAX_DEPTH = 100
#: The largest frame read (one reply: a returned value and the mutated arguments).
FRAME_CAP = 16 << 20
_SMALL_INT = 1 << 53


class NotPlain(Exception):
    """A value that is not plain data (or nests deeper than MAX_DEPTH)."""


class BadFrame(Exception):
    """A frame that is not what the protocol says (garbage, wrong tags, too big)."""


class PeerGone(Exception):
    """The other end closed its pipe: its process ended."""


class PeerLate(Exception):
    """Nothing (or no complete frame) arrived before the deadline."""


def encode(v, depth=0):
    """The tagged-JSON form of ``v``; NotPlain when it is not plain data."""
    if depth > MAX_DEPTH:
        raise NotPlain(f"nested deeper than {MAX_DEPTH} levels")
    t = type(v)
    if v is None or t is bool or t is str:
        return v
    if t is int:
        return v if -_SMALL_INT < v < _SMALL_INT else {"I": format(v, "x")}
    if t is float:
        return v if math.isfinite(v) else {"F": repr(v)}
    d = depth + 1
    if t is list:
        return {"l": [encode(x, d) for x in v]}
    if t is tuple:
        return {"t": [encode(x, d) for x in v]}
    if t is dict:
        return {"d": [[encode(k, d), encode(x, d)] for k, x in v.items()]}
    if t is set:
        return {"s": [encode(x, d) for x in v]}
    if t is frozenset:
        return {"f": [encode(x, d) for x in v]}
    if t is complex:
        return {"c": [encode(v.real, d), encode(v.imag, d)]}
    if t is bytes:
        return {"b": v.hex()}
    if t is bytearray:
        return {"ba": v.hex()}
    return _encode_subclass(v, d)


def _encode_subclass(v, d):
    """A subclass of a plain type as its base value, read past its overrides."""
    if isinstance(v, bool):
        return bool.__bool__(v)
    if isinstance(v, int):
        return encode(int.__int__(v), d)
    if isinstance(v, float):
        return encode(float.__float__(v), d)
    if isinstance(v, str):
        return str.__str__(v)
    if isinstance(v, (bytes, bytearray)):
        return {"b" if isinstance(v, bytes) else "ba": bytes(memoryview(v)).hex()}
    if isinstance(v, tuple):
        return {"t": [encode(x, d) for x in tuple.__iter__(v)]}
    if isinstance(v, list):
        return {"l": [encode(x, d) for x in list.__iter__(v)]}
    if isinstance(v, dict):
        return {"d": [[encode(k, d), encode(x, d)] for k, x in dict.items(v)]}
    if isinstance(v, frozenset):
        return {"f": [encode(x, d) for x in frozenset.__iter__(v)]}
    if isinstance(v, set):
        return {"s": [encode(x, d) for x in set.__iter__(v)]}
    if isinstance(v, complex):
        return {"c": [encode(complex.__complex__(v).real, d),
                      encode(complex.__complex__(v).imag, d)]}
    raise NotPlain(f"a {type(v).__name__!s:.60} is not plain data")


_SCALARS = (str, bool, int, float)
_SEQ = {"l": list, "t": tuple, "s": set, "f": frozenset}


def decode(o, depth=0):
    """The value of a tagged-JSON form; BadFrame when it is not one."""
    if depth > MAX_DEPTH + 2:
        raise BadFrame(f"nested deeper than {MAX_DEPTH} levels")
    if o is None or type(o) in _SCALARS:
        return o
    if type(o) is not dict or len(o) != 1:
        raise BadFrame(f"not a tagged value: {type(o).__name__}")
    (tag, x), = o.items()
    d = depth + 1
    try:
        if tag in _SEQ and type(x) is list:
            return _SEQ[tag](decode(e, d) for e in x)
        if tag == "d" and type(x) is list:
            return {decode(k, d): decode(e, d) for k, e in (_pair(p) for p in x)}
        if tag == "I" and type(x) is str and len(x) <= 1 << 20:
            return int(x, 16)
        if tag == "F" and x in ("inf", "-inf", "nan"):
            return float(x)
        if tag == "c" and type(x) is list and len(x) == 2:
            re, im = decode(x[0], d), decode(x[1], d)
            if type(re) is float and type(im) is float:
                return complex(re, im)
        if tag in ("b", "ba") and type(x) is str:
            return (bytes if tag == "b" else bytearray).fromhex(x)
    except (TypeError, ValueError) as e:  # an unhashable key or member, a bad hex string
        raise BadFrame(f"bad {tag!r} value: {e}") from None
    raise BadFrame(f"unknown tag {tag!r}")


def _pair(p):
    if type(p) is not list or len(p) != 2:
        raise BadFrame("a dict item is not a [key, value] pair")
    return p


def canonical(o):
    """A tagged form with set members and dict items in a fixed order: equal values
    (whatever their insertion or hash order) give equal text, for behaviour keys."""
    if type(o) is not dict:
        return o
    (tag, x), = o.items()
    if tag in ("l", "t"):
        return {tag: [canonical(e) for e in x]}
    if tag in ("s", "f"):
        return {tag: sorted((canonical(e) for e in x), key=_text)}
    if tag == "d":
        return {tag: sorted(([canonical(k), canonical(e)] for k, e in x),
                            key=lambda kv: _text(kv[0]))}
    return o


def _text(o):
    return json.dumps(o, sort_keys=True, ensure_ascii=True)


def dumps(obj):
    """One frame: the object as one ASCII JSON line."""
    return (json.dumps(obj, ensure_ascii=True, allow_nan=False) + "\n").encode("ascii")


def loads(line):
    """A frame's object (a dict); BadFrame for anything else."""
    try:
        obj = json.loads(line)
    except (ValueError, RecursionError) as e:
        raise BadFrame(f"not a JSON frame ({str(e)[:80]})") from None
    if type(obj) is not dict:
        raise BadFrame("a frame is not a JSON object")
    return obj


class Channel:
    """Frames over a pair of pipe fds: ``recv`` waits at most until a deadline for one
    line of at most ``cap`` bytes; ``send`` never blocks past its deadline."""

    def __init__(self, rfd, wfd, cap=FRAME_CAP):
        self.rfd, self.wfd, self.cap = rfd, wfd, cap
        self.buf = bytearray()
        self.scan = 0
        self.eof = False
        os.set_blocking(wfd, False)

    def recv(self, deadline):
        while True:
            i = self.buf.find(b"\n", self.scan)
            if i >= 0:
                line = bytes(self.buf[:i])
                del self.buf[:i + 1]
                self.scan = 0
                return loads(line)
            self.scan = len(self.buf)
            if len(self.buf) > self.cap:
                raise BadFrame(f"a frame over {self.cap} bytes")
            if self.eof:
                raise PeerGone("the other process closed its pipe")
            left = deadline - time.monotonic()
            if left <= 0:
                raise PeerLate("no answer before the deadline")
            if not _wait(self.rfd, select.POLLIN, left):
                continue
            chunk = os.read(self.rfd, 1 << 16)
            if chunk:
                self.buf += chunk
            else:
                self.eof = True

    def send(self, obj, deadline):
        data = memoryview(dumps(obj))
        while data:
            left = deadline - time.monotonic()
            if left <= 0:
                raise PeerLate("the other process does not read")
            if not _wait(self.wfd, select.POLLOUT, left):
                continue
            try:
                n = os.write(self.wfd, data)
            except BlockingIOError:
                continue
            except (BrokenPipeError, ConnectionResetError):
                raise PeerGone("the other process closed its pipe") from None
            data = data[n:]


def open_pair_fds(hello_byte):
    """(read fd, write fd) of the pipes to the peer, from ``$VLCOHORT_PASS_FDS``, after
    writing ``hello_byte`` on the first fd: the host closes its copies of the pipes only
    once both sides have started, so that each sees end-of-file when the other goes."""
    hello, rfd, wfd = (int(x) for x in os.environ.pop("VLCOHORT_PASS_FDS").split(","))
    try:
        os.write(hello, hello_byte)
    finally:
        os.close(hello)
    return rfd, wfd


def _wait(fd, event, timeout_s):
    """poll (not select: an inherited fd may be numbered above 1024)."""
    p = select.poll()
    p.register(fd, event)
    ms = -1 if timeout_s == math.inf else max(1, int(min(timeout_s, 3600.0) * 1000))
    return bool(p.poll(ms))
