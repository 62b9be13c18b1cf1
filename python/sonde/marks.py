"""Marks inside a run: ``sonde.mark("train")`` begins the phase "train" of the `sonde run` this
process belongs to (the summary and the report show each phase). Outside `sonde run` it does
nothing, so a program can mark its phases whether or not it is monitored.

The run gives its command a marks file in $SONDE_MARKS; a mark is one line,
``<unix time> <name>\\n``, appended with one write (docs/compare.md, "Marks")."""

import os
import time

ENV = "SONDE_MARKS"
_MAX_NAME = 200


def _clean(name):
    text = "".join(" " if ord(c) < 0x20 or c == "\x7f" else c for c in str(name)).strip()
    data = text.encode("utf-8", "replace")[:_MAX_NAME]
    return data.decode("utf-8", "ignore").strip()


def mark(name):
    """Begins the phase `name` now. Returns True when the mark was written, False outside
    `sonde run`. Raises ValueError for an empty name, OSError when the marks file cannot be
    written."""
    clean = _clean(name)
    if not clean:
        raise ValueError("a mark needs a name (printable text, at most 200 bytes)")
    path = os.environ.get(ENV)
    if not path:
        return False
    line = ("%.6f %s\n" % (time.time(), clean)).encode("utf-8")
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CLOEXEC | os.O_NOFOLLOW)
    try:
        if os.write(fd, line) != len(line):
            raise OSError("short write to the marks file %s" % path)
    finally:
        os.close(fd)
    return True
