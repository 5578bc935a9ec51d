"""A DebugWriter's session in its run: the start and end records.

Each DebugWriter that watches a model is one *session* of its run
(docs/FORMAT.md, *Sessions*): it writes a start record when it starts
watching (who writes, from which step, and from which step what earlier
writers wrote is hidden: its ``purge_step``) and an end record when it
closed cleanly (its last step; the signal that closed it, if one did). A
reader tells a run whose writer was killed by the missing end
(``format/sessions.py`` reads both; tests/test_resume.py and
tests/test_signals.py's killed runs decide).
"""

from __future__ import annotations

import os
import signal
import socket
import uuid

from ...format import metadata, summary

__all__ = ["Session"]


class Session:
    """One writer's session: ``start()`` when it watches, ``end()`` when it
    closed cleanly; ``signal`` names the signal that closed it (None: its
    own ``close()``)."""

    def __init__(self, start_step: int, purge_step: int | None):
        self.id = uuid.uuid4().hex
        self.start_step = int(start_step)
        self.purge_step = purge_step
        self.signal: str | None = None

    def start(self, file_writer) -> None:
        """Write the start record into ``file_writer`` (a torch FileWriter)."""
        payload = {"session": self.id, "pid": os.getpid(), "host": socket.gethostname(),
                   "start_step": self.start_step, "purge_step": self.purge_step}
        file_writer.add_summary(summary.session_summary(metadata.TAG_SESSION_START, payload),
                                global_step=self.start_step)

    def closed_by(self, signum: int) -> None:
        """The session ends on ``signum`` (SIGTERM: its end record says so)."""
        try:
            self.signal = signal.Signals(signum).name
        except ValueError:
            self.signal = str(signum)

    def end(self, file_writer, next_step: int) -> None:
        """Write the end record; ``next_step``: the step the writer would
        have recorded next (its last step is the one before)."""
        last = max(self.start_step, int(next_step)) - 1
        payload = {"session": self.id, "last_step": last, "signal": self.signal}
        file_writer.add_summary(summary.session_summary(metadata.TAG_SESSION_END, payload),
                                global_step=max(self.start_step, last))
