"""One event file read with bounds: TFRecord framing checked, no length trusted.

An event file is a sequence of TFRecords: a little-endian u64 length, the
masked CRC32C of those 8 bytes, the data, the masked CRC32C of the data.
TensorBoard's Python reader allocates whatever a length says (a record that
announces 2^40 bytes is a MemoryError), stops without a word at the first bad
checksum, and lets a record that is not an ``Event`` raise ``DecodeError``.
Here (``read_events``):

- a length is believed once its checksum matches, and only up to the bytes
  left in the file; a record over ``MAX_RECORD_BYTES`` is stepped over, not
  read;
- only records holding a neuraldbg tag (a substring test on the raw bytes:
  nothing is parsed) are checksummed and parsed, so another tool's events
  cost a length check each, and a file without any neuraldbg tag is not
  walked at all;
- a record whose data checksum fails, or that is not an ``Event``, is skipped
  and named by its offset, and reading goes on (its length was checked, so
  the framing holds: the Rust data server reads this far too);
- where the framing is lost (a bad length checksum, a length beyond the end
  of the file) reading stops, and the bytes left unread are named.

Each of these is reported to ``problem`` as one line; every one means data of
the file was not read. Nothing is unpickled and nothing is executed.
"""

from __future__ import annotations

import os
import stat
import struct
from typing import Callable, Iterator

from google.protobuf.message import DecodeError
from tensorboard.compat import tf
from tensorboard.compat.proto import event_pb2

from ..format import metadata
from ..format.crc import masked_crc

__all__ = ["MAX_RECORD_BYTES", "MARKER", "NotRegularFile", "masked_crc", "read_events"]

# No neuraldbg record comes near this (a step of 1,000 layers is ~70 KB);
# protobuf itself refuses messages over 2 GiB.
MAX_RECORD_BYTES = 256 << 20
# Bytes every record holding a neuraldbg tag contains (the tag's prefix).
MARKER = metadata.TAG_PREFIX.encode()
_BLOCK = 4 << 20  # bytes read at a time
_HEAD = 4096  # bytes of a large record looked at to tell whether it is ours
_HEADER = struct.Struct("<QI")
_CRC = struct.Struct("<I")

Problem = Callable[[str], None]


class NotRegularFile(OSError):
    """The path is a FIFO, a device, a socket or a directory, not a file."""


class _LengthCrcs(dict):
    """The checksum a length must carry, by length: lengths repeat (every
    scalar event of a tag is as long), so each is computed once."""

    def __missing__(self, length: int) -> int:
        crc = masked_crc(struct.pack("<Q", length))
        if len(self) < 65536:
            self[length] = crc
        return crc


_LENGTH_CRC = _LengthCrcs()


class _RemoteFile:
    """A file of TensorBoard's file layer (s3://, gs://, ...): its compat
    GFile reads forward only, so a seek forward reads and drops, and a seek
    back opens the file again."""

    def __init__(self, path: str):
        self._path = path
        self._f = tf.io.gfile.GFile(path, "rb")
        self._pos = 0

    def seek(self, offset: int) -> None:
        if offset < self._pos:
            self._f.close()
            self._f, self._pos = tf.io.gfile.GFile(self._path, "rb"), 0
        while self._pos < offset:
            chunk = self._f.read(min(_BLOCK, offset - self._pos))
            if not chunk:
                break
            self._pos += len(chunk)

    def read(self, n: int) -> bytes:
        data = self._f.read(n)
        self._pos += len(data)
        return data

    def close(self) -> None:
        self._f.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def _open(path: str):
    """(binary file, size) of a regular file; NotRegularFile for anything else.

    Local files are opened non-blocking and checked on the open descriptor:
    a FIFO named like an event file can neither hang the open nor the read,
    nor be swapped in between a check and the open.
    """
    if "://" in path:
        gfile = tf.io.gfile
        if gfile.isdir(path):
            raise NotRegularFile("a directory")
        return _RemoteFile(path), int(gfile.stat(path).length)
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0))
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            kind = ("a FIFO" if stat.S_ISFIFO(st.st_mode) else "a directory"
                    if stat.S_ISDIR(st.st_mode) else "a device or socket")
            raise NotRegularFile(f"not a regular file ({kind})")
        return os.fdopen(fd, "rb", buffering=0), st.st_size
    except BaseException:
        os.close(fd)
        raise


def _last_marker(f, size: int) -> int:
    """Offset just past the last MARKER in the file (0 if none), read from
    the end: the writer's records usually reach the end, so one block tells."""
    end = size
    overlap = len(MARKER) - 1
    while end > 0:
        start = max(0, end - _BLOCK)
        f.seek(start)
        block = f.read(end - start + (overlap if end < size else 0))
        hit = block.rfind(MARKER)
        if hit >= 0:
            return start + hit + len(MARKER)
        end = start
    return 0


class _Reader:
    """Sequential reads of one file through a block buffer."""

    def __init__(self, f, size: int):
        self.f = f
        self.size = size
        self.buf = b""
        self.base = 0  # file offset of buf[0]
        self.pos = 0  # index in buf of the next record

    @property
    def offset(self) -> int:
        return self.base + self.pos

    def have(self, n: int) -> bool:
        """Make buf[pos:pos+n] available; False if the file ends first."""
        if len(self.buf) - self.pos >= n:
            return True
        left = self.size - self.offset
        if n > left:
            return False
        self.f.seek(self.offset)
        want = max(n, min(_BLOCK, left))
        chunk = self.f.read(want)
        self.buf, self.base, self.pos = chunk, self.offset, 0
        return len(chunk) >= n

    def skip_to(self, offset: int) -> None:
        if self.base <= offset <= self.base + len(self.buf):
            self.pos = offset - self.base
        else:
            self.buf, self.base, self.pos = b"", offset, 0

    def peek_at(self, offset: int, n: int) -> bytes:
        self.f.seek(offset)
        return self.f.read(n)


def _frames(reader: _Reader, stop: int, name: str, problem: Problem) -> Iterator[tuple[int, bytes]]:
    """(offset, data) of every checked record holding MARKER that starts
    before ``stop``; problems as described in the module docstring."""
    size = reader.size
    while reader.offset < stop:
        offset = reader.offset
        if not reader.have(12):
            problem(f"{name}: ends inside a record header at offset {offset}: "
                    f"{size - offset} bytes not read (cut short, or still being written)")
            return
        length, length_crc = _HEADER.unpack_from(reader.buf, reader.pos)
        if length_crc != _LENGTH_CRC[length]:
            problem(f"{name}: bad length checksum at offset {offset}: the framing is lost, "
                    f"{size - offset} bytes not read")
            return
        end = offset + 12 + length + 4
        if end > size:
            why = ("cut short, or still being written" if length <= MAX_RECORD_BYTES
                   else "the framing is lost")
            problem(f"{name}: the record at offset {offset} announces {length} bytes, beyond "
                    f"the end of the file: {size - offset} bytes not read ({why})")
            return
        if length > _BLOCK:
            head = reader.peek_at(offset + 12, _HEAD)
            if MARKER not in head:
                reader.skip_to(end)  # another tool's large record (a graph, an image)
                continue
            if length > MAX_RECORD_BYTES:
                problem(f"{name}: skipped a neuraldbg record of {length} bytes at offset "
                        f"{offset}: over the limit of {MAX_RECORD_BYTES} bytes")
                reader.skip_to(end)
                continue
        if not reader.have(12 + length + 4):  # the file shrank while being read
            problem(f"{name}: ends inside the record at offset {offset}: "
                    f"{size - offset} bytes not read")
            return
        start = reader.pos + 12
        stop_data = start + length
        if reader.buf.find(MARKER, start, stop_data) < 0:
            reader.pos = stop_data + 4
            continue
        data = reader.buf[start:stop_data]
        (data_crc,) = _CRC.unpack_from(reader.buf, stop_data)
        reader.pos = stop_data + 4
        if masked_crc(data) != data_crc:
            problem(f"{name}: skipped the record at offset {offset} ({length} bytes): bad data "
                    "checksum")
            continue
        yield offset, data


def read_events(path: str, problem: Problem, name: str | None = None) -> Iterator[event_pb2.Event]:
    """The Events of ``path`` that hold a neuraldbg tag, in file order.

    ``problem`` receives one line for each part of the file that was not
    read (see the module docstring); ``name`` names the file in them
    (default: ``path``). Raises NotRegularFile (an OSError) for a FIFO,
    device or directory, OSError when the file cannot be opened.
    """
    name = name or path
    f, size = _open(path)
    with f:
        # Looking from the end is a seek for a local file, a reread for a remote one.
        stop = size if isinstance(f, _RemoteFile) else _last_marker(f, size)
        if stop == 0:
            return  # nothing of ours: not even walked
        reader = _Reader(f, size)
        for offset, data in _frames(reader, stop, name, problem):
            try:
                event = event_pb2.Event.FromString(data)
            except (DecodeError, RecursionError, ValueError) as e:
                problem(f"{name}: skipped the record at offset {offset} ({len(data)} bytes): "
                        f"not an event ({type(e).__name__})")
                continue
            yield event
