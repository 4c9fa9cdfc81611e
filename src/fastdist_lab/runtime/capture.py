"""What a worker captures: a call's printed output (its beginning and end, at line boundaries, with a visible marker
for what was cut), and the C++ side of torch's stderr while the rendezvous store is joined."""

from __future__ import annotations

import collections
import contextlib
import io
import os
import sys
import tempfile
from collections.abc import Iterator

HEAD_CHARS = 512 * 1024
"""Characters kept from the beginning of a call's stdout (and, separately, its stderr)."""
TAIL_CHARS = 512 * 1024
"""Characters kept from the end."""
HARMLESS_C10D = (b"The hostname of the client socket cannot be retrieved",)
"""Lines torch's C++ code prints while a store is joined that say nothing to a local cluster's user (the resolver
cannot name 127.0.0.1); filtered out, everything else passes through."""


class OutputCapture(io.StringIO):
    """A text stream keeping the first ``head`` and the last ``tail`` characters written to it.

    ``getvalue()`` returns everything when it fit; otherwise the beginning up to its last whole line, a marker
    line ``[... N lines (M characters) cut ...]`` and the end from its first whole line.
    """

    def __init__(self, head: int = HEAD_CHARS, tail: int = TAIL_CHARS):
        super().__init__()
        self._head_limit, self._tail_limit = head, tail
        self._tail: collections.deque[str] | None = None  # once the head is full
        self._tail_size = 0
        self._cut_chars = 0
        self._cut_lines = 0
        self._tail_starts_line = True

    def write(self, text: str) -> int:
        """Keep ``text`` in the head while it has room, then in the tail (dropping the tail's oldest text)."""
        length = len(text)
        if self._tail is None:
            room = self._head_limit - self.tell()
            if length <= room:
                return super().write(text)
            if room > 0:
                super().write(text[:room])
            self._tail = collections.deque()
            text = text[max(room, 0) :]
        self._tail.append(text)
        self._tail_size += len(text)
        while self._tail_size > self._tail_limit:
            excess = self._tail_size - self._tail_limit
            first = self._tail[0]
            dropped, self._tail[0] = first[:excess], first[excess:]
            if not self._tail[0]:
                self._tail.popleft()
            self._tail_size -= len(dropped)
            self._cut_chars += len(dropped)
            self._cut_lines += dropped.count("\n")
            self._tail_starts_line = dropped.endswith("\n")
        return length

    def getvalue(self) -> str:
        """The captured text, with the marker where something was cut."""
        head = super().getvalue()
        if self._tail is None:
            return head
        tail = "".join(self._tail)
        if not self._cut_chars:
            return head + tail
        cut_chars, cut_lines = self._cut_chars, self._cut_lines
        end = head.rfind("\n") + 1
        if end:  # the head's unfinished last line goes too
            cut_chars += len(head) - end
            head = head[:end]
        start = 0 if self._tail_starts_line else tail.find("\n") + 1
        if 0 < start < len(tail):  # and so does what is left of the line the tail starts in
            cut_chars += start
            cut_lines += 1
            tail = tail[start:]
        marker = f"[... {cut_lines} lines ({cut_chars} characters) cut ...]\n"
        return head + ("" if head.endswith("\n") or not head else "\n") + marker + tail


@contextlib.contextmanager
def quiet_harmless_c10d(*also: bytes) -> Iterator[None]:
    """Filter ``HARMLESS_C10D`` lines (and lines containing any of ``also``) out of what C++ code writes to this
    process's stderr (file descriptor 2) inside the block; every other line is written to stderr afterwards."""
    sys.stderr.flush()
    try:
        saved = os.dup(2)
    except OSError:
        yield
        return
    with tempfile.TemporaryFile() as spool:
        os.dup2(spool.fileno(), 2)
        try:
            yield
        finally:
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
            spool.seek(0)
            harmless = HARMLESS_C10D + also
            for line in spool:  # a line at a time: what torch wrote may be long
                if not any(t in line for t in harmless):
                    os.write(2, line)
