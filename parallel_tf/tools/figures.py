"""The tools' pictures: matplotlib for files only (no display), each figure written whole or not at
all, since a study rewrites its pictures after every run while someone may be looking at them."""

from parallel_tf.files import written_atomically


def pyplot():
    """matplotlib.pyplot on the Agg backend, imported on first use (a second; the commands that draw
    nothing never pay for it)."""
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot as plt

    return plt


def save(figure, path, dpi=110):
    """Writes `figure` to `path` under a temporary name and renames it, and closes it."""
    with written_atomically(path) as partial:
        figure.savefig(partial, dpi=dpi)
    pyplot().close(figure)
