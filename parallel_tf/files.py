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


def write_between(path, generated, begin, end, new_file_title):
    """`generated` in place of the old one between the markers `begin` and `end` in `path`, keeping the
    text around it; appended if there is none, in a new file (under `new_file_title`) if there is no file."""
    text = ""
    if os.path.exists(path):
        with open(path, encoding="utf-8") as f:
            text = f.read()
    if begin in text and end in text:
        text = text[: text.index(begin)] + generated + text[text.index(end) + len(end) :]
    else:
        text = f"{text.rstrip()}\n\n{generated}\n" if text else f"{new_file_title}\n\n{generated}\n"
    write_atomically(path, text)
