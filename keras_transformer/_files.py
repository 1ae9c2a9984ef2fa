"""Writing files so that an interruption never leaves a half-written one.

A file is written under a temporary name in its own directory, flushed to
disk, then renamed over the old one (`os.replace` is atomic on POSIX and on
Windows). A crash or a `SIGKILL` at any moment leaves either the old file or
the new one, and at worst a stray `.tmp-*` file that the next write removes.
"""

import contextlib
import glob
import os

TEMP_PREFIX = ".tmp-"


@contextlib.contextmanager
def atomic_path(path):
    """Yield a temporary path next to `path`; rename it to `path` on success.

    The temporary name keeps the file name's suffix (Keras checks that weights
    end in `.weights.h5` and models in `.keras`). On an exception the
    temporary file is removed and `path` is left as it was.
    """
    directory, name = os.path.split(os.path.abspath(path))
    os.makedirs(directory, exist_ok=True)
    for stale in glob.glob(os.path.join(glob.escape(directory), f"{TEMP_PREFIX}*-{name}")):
        os.remove(stale)
    temporary = os.path.join(directory, f"{TEMP_PREFIX}{os.getpid()}-{name}")
    try:
        yield temporary
        _fsync(temporary)
        os.replace(temporary, path)
    finally:
        if os.path.exists(temporary):
            os.remove(temporary)


def write_text(path, text):
    """Write `text` to `path` (UTF-8, `\\n` line ends) atomically."""
    with atomic_path(path) as temporary, open(temporary, "w", encoding="utf-8",
                                              newline="\n") as f:
        f.write(text)


def _fsync(path):
    with open(path, "rb") as f:
        os.fsync(f.fileno())
