"""Which directories of a logdir are runs, and which files are their event files.

A run is a directory holding at least one regular file whose name contains
"tfevents"; it is named, as TensorBoard names it, by its path relative to the
logdir ("." for the logdir itself), and its event files are read in name
order. Local logdirs are walked here, with bounds TensorBoard's walkers do
not have:

- a directory reached twice (a symlink loop, two links to one run) is read
  once, under the first name met in sorted order;
- a symlink to the logdir or to a directory above it (e.g. to ``/``) is not
  followed;
- at most ``MAX_DIRECTORIES`` directories are listed;
- FIFOs, devices and sockets named like event files are skipped, unopened;
- a directory that cannot be listed is skipped.

Each of these is one line to ``note``. Remote logdirs (s3://, gs://, ...)
are listed through TensorBoard's file layer (``tf.io.gfile.walk``), with the
same directory bound.
"""

from __future__ import annotations

import os
import stat
from typing import Callable, NamedTuple

from tensorboard.compat import tf

__all__ = ["MAX_DIRECTORIES", "RunFiles", "is_event_file", "list_runs", "run_files"]

MAX_DIRECTORIES = 100_000

Note = Callable[[str], None]


class RunFiles(NamedTuple):
    """One run: TensorBoard's name for it, its directory, its event files in
    the order they are read."""

    name: str
    path: str
    files: list


def is_event_file(name: str) -> bool:
    """TensorBoard's test for an event file (``io_wrapper.IsTensorFlowEventsFile``)."""
    return "tfevents" in name


def _kind(mode: int) -> str:
    if stat.S_ISFIFO(mode):
        return "a FIFO"
    if stat.S_ISDIR(mode):
        return "a directory"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return "a device" if stat.S_ISCHR(mode) or stat.S_ISBLK(mode) else "not a regular file"


def _ancestors(path: str) -> set:
    """(device, inode) of ``path`` and of every directory above it."""
    keys = set()
    current = os.path.realpath(path)
    while True:
        try:
            st = os.stat(current)
            keys.add((st.st_dev, st.st_ino))
        except OSError:
            pass
        parent = os.path.dirname(current)
        if parent == current:
            return keys
        current = parent


def _listing(path: str, note: Note) -> tuple[list, list]:
    """(event files, [(full path, name, (device, inode), is a link)] of
    subdirectories) directly in local directory ``path``, sorted by name;
    non-regular files named like event files are noted and left out.
    Raises OSError when ``path`` cannot be listed."""
    with os.scandir(path) as it:
        entries = sorted(it, key=lambda e: e.name)
    files, subdirs = [], []
    for entry in entries:
        full = os.path.join(path, entry.name)
        try:
            st = entry.stat()  # follows symlinks
        except OSError as e:  # a dangling link, a permission problem
            if is_event_file(entry.name):
                note(f"skipped {full}: {e.strerror or e}")
            continue
        if stat.S_ISDIR(st.st_mode):
            subdirs.append((full, entry.name, (st.st_dev, st.st_ino), entry.is_symlink()))
        elif is_event_file(entry.name):
            if stat.S_ISREG(st.st_mode):
                files.append(full)
            else:
                note(f"skipped {full}: {_kind(st.st_mode)}, not an event file")
    return files, subdirs


def _local_runs(logdir: str, note: Note) -> list[RunFiles]:
    above = _ancestors(logdir)
    root = os.stat(logdir)
    seen = {(root.st_dev, root.st_ino)}
    runs, stack, listed = [], [(logdir, "")], 0
    while stack:
        path, rel = stack.pop()
        listed += 1
        if listed > MAX_DIRECTORIES:
            note(f"stopped after listing {MAX_DIRECTORIES} directories; the rest of the logdir "
                 "was not read")
            break
        try:
            files, found = _listing(path, note)
        except OSError as e:
            note(f"skipped {path}: cannot list it ({e.strerror or e})")
            continue
        subdirs = []
        for full, name, key, link in found:
            if link and key in above:
                note(f"skipped {full}: a link to {os.path.realpath(full)}, which holds the logdir")
            elif key in seen:
                if link:
                    note(f"skipped {full}: a link to a directory already read")
            else:
                seen.add(key)
                subdirs.append((full, os.path.join(rel, name) if rel else name))
        if files:
            runs.append(RunFiles(rel or ".", path, files))
        stack.extend(reversed(subdirs))
    return runs


def _remote_runs(logdir: str, note: Note) -> list[RunFiles]:
    gfile = tf.io.gfile
    runs, listed = [], 0
    base = logdir.rstrip("/")
    for dirpath, _, files in gfile.walk(logdir):
        listed += 1
        if listed > MAX_DIRECTORIES:
            note(f"stopped after listing {MAX_DIRECTORIES} directories; the rest of the logdir "
                 "was not read")
            break
        events = sorted(f for f in files if is_event_file(f))
        if events:
            rel = dirpath.rstrip("/")[len(base):].lstrip("/") or "."
            runs.append(RunFiles(rel, dirpath, [f"{dirpath.rstrip('/')}/{f}" for f in events]))
    return runs


def list_runs(logdir: str, note: Note) -> list[RunFiles]:
    """The runs under ``logdir`` (an existing directory), sorted by name."""
    walk = _remote_runs if "://" in logdir else _local_runs
    return sorted(walk(logdir, note), key=lambda r: r.name)


def run_files(path: str, note: Note) -> list:
    """The event files directly in directory ``path``, in reading order."""
    if "://" in path:
        names = sorted(n for n in tf.io.gfile.listdir(path) if is_event_file(n))
        return [f"{path.rstrip('/')}/{n}" for n in names]
    return _listing(path, note)[0]
