"""Files written whole or not at all: a reader, or a run resumed after a crash, never finds half of
one (summary.json's presence means a run finished; a study's report is read while it runs)."""

import contextlib
import os


@contextlib.contextmanager
def written_atomically(path):
    """A temporary name beside `path` to write the file to; renamed into place (atomic on POSIX) once
    the block is done. It keeps the extension, which np.savez and matplotlib's savefig go by."""
    base, extension = os.path.splitext(path)
    partial = f"{base}.tmp{extension}"
    yield partial
    os.replace(partial, path)


def write_atomically(path, text):
    """Writes `text` to `path` whole or not at all."""
    with written_atomically(path) as partial, open(partial, "w", encoding="utf-8") as f:
        f.write(text)
