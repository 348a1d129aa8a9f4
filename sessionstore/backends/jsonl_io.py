"""Reads and writes of one JSONL event log open as a descriptor (see :mod:`.jsonl` for the
layout and the locking, :mod:`.jsonl_format` for the lines): its first line, the bytes
after an offset, the end of its committed events, and the write of one batch."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from ..errors import SessionNotFoundError, StoreUnavailableError
from .fsutil import store_error
from .jsonl_format import MalformedLine, parse_event

if TYPE_CHECKING:
    from .dirhandle import Folder

#: How many bytes one ``pread`` of a log asks for, at least.
CHUNK = 64 * 1024


def open_existing(folder: Folder, name: str) -> int | None:
    """The file ``name`` in ``folder`` opened for reading, or None when there is no such
    file (see :meth:`.dirhandle.Folder.open`)."""
    try:
        return folder.open(name, os.O_RDONLY)
    except FileNotFoundError:
        return None


def open_log(session_id: str, folder: Folder | None, name: str, flags: int) -> int:
    """The log ``name`` in ``folder`` opened with ``flags`` (see :meth:`.dirhandle.Folder.open`);
    :class:`SessionNotFoundError` if absent (``folder`` None: the folder is missing)."""
    if folder is None:
        raise SessionNotFoundError(session_id)
    try:
        return folder.open(name, flags)
    except FileNotFoundError:
        raise SessionNotFoundError(session_id) from None


def still_named(fd: int, folder: Folder, name: str) -> bool:
    """Whether ``name`` in ``folder`` still names the file open as ``fd`` (not unlinked
    or replaced)."""
    try:
        named = folder.stat(name)
    except FileNotFoundError:
        return False
    held = os.fstat(fd)
    return (named.st_dev, named.st_ino) == (held.st_dev, held.st_ino)


def first_line(fd: int) -> bytes | None:
    """The first line without its newline, or None when it is not complete."""
    data = b""
    while True:
        chunk = os.pread(fd, CHUNK, len(data))
        if not chunk:
            return None
        cut = chunk.find(b"\n")
        if cut >= 0:
            return data + chunk[:cut]
        data += chunk


def read_from(fd: int, offset: int) -> bytes:
    """Everything in the file open as ``fd`` from ``offset`` on."""
    chunks: list[bytes] = []
    while chunk := os.pread(fd, max(CHUNK, os.fstat(fd).st_size - offset), offset):
        chunks.append(chunk)
        offset += len(chunk)
    return b"".join(chunks)


def last_committed(fd: int, start: int, size: int) -> tuple[int, int | None]:
    """(next seq, time of the last committed event) of a log whose events start at
    offset ``start``, read backwards from its end: the last complete line that ends its
    batch is the last committed event; what follows it is a torn tail. (0, None) for a
    log without events. Lines that do not parse are passed over (``read`` judges them)."""
    pos, carry, ended = size, b"", False
    while pos > start:
        step = min(CHUNK, pos - start)
        pos -= step
        carry = os.pread(fd, step, pos) + carry
        if not ended:
            cut = carry.rfind(b"\n")
            if cut < 0:
                continue
            carry, ended = carry[: cut + 1], True
        lines = carry.split(b"\n")
        complete = lines[1:-1] if pos > start else lines[:-1]
        for line in reversed(complete):
            try:
                record, batch_end = parse_event(line)
            except MalformedLine:
                continue
            if record["seq"] == batch_end:
                return batch_end + 1, record["time"]
        carry = lines[0] + b"\n" if pos > start else b""
    return 0, None


def write_batch(fd: int, path: str, data: bytes, end: int) -> None:
    """One ``write`` and an fsync; on failure the file is cut back to ``end`` if possible,
    so a failed append leaves no torn tail behind."""
    try:
        written = os.write(fd, data)
        if written == len(data):
            os.fsync(fd)
            return
    except OSError as exc:
        _cut_back(fd, end)
        raise store_error(exc, path) from exc
    _cut_back(fd, end)
    raise StoreUnavailableError(
        f"file store unavailable at {path}: wrote {written} of {len(data)} bytes (disk full?)"
    )


def _cut_back(fd: int, end: int) -> None:
    try:
        os.ftruncate(fd, end)
        os.fsync(fd)
    except OSError:
        pass  # the reader leaves an unfinished batch out anyway
