"""Files written whole or not at all: a reader, or a run resumed after a crash, never finds half of
one (summary.json's presence means a run finished; a study's report is read while it runs)."""

import os


def write_atomically(path, text):
    """Writes `text` under a temporary name beside `path`, then renames it into place (atomic on POSIX)."""
    partial = path + ".tmp"
    with open(partial, "w", encoding="utf-8") as f:
        f.write(text)
    os.replace(partial, path)
