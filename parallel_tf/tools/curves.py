"""A study's training-loss curves: every run's logged loss against step, time and the megabytes the
chief has sent. Free of TensorFlow."""

from parallel_tf.backports import zip_strict
from parallel_tf.tools import figures


def plot(rows, path):
    """One line per run, loss against step, against time, and against the megabytes the chief has sent
    (traffic.py); the reference dashed and black (it sends nothing, so it is not in the third)."""
    pyplot = figures.pyplot()
    figure, (by_step, by_time, by_bytes) = pyplot.subplots(1, 3, figsize=(20, 7), sharey=True)
    for row in rows:
        steps, losses = zip_strict(*row["losses"])
        if row["variant"] == "reference":
            style = {"color": "k", "linestyle": "--", "linewidth": 2, "zorder": 3, "label": "reference (one process)"}
        else:
            style = {"linewidth": 1.2, "alpha": 0.8, "label": f"{row['variant']} N={row['workers']} {repeat_name(row)}"}
        line = by_step.plot(steps, losses, **style)[0]
        by_time.plot(row["seconds"], losses, **{**style, "color": line.get_color()})
        if row["variant"] != "reference":
            by_bytes.plot(row["megabytes_sent"], losses, **{**style, "color": line.get_color()})
    by_step.set_xlabel("global step")
    by_time.set_xlabel("seconds since training started")
    by_bytes.set_xlabel("MB the chief has sent")
    by_step.set_ylabel("training loss (logged batch)")
    by_step.set_yscale("log")
    figure.suptitle(f"Loss curves: {len(rows) - 1} cluster runs and the one-process reference (equal runs overlap)")
    for axes in (by_step, by_time, by_bytes):
        axes.grid(True, which="both", alpha=0.3)
    handles, labels = by_step.get_legend_handles_labels()  # below the plots: long variant names fit there
    legend_rows = -(-len(labels) // 3)
    figure.legend(handles, labels, loc="lower center", ncol=3, fontsize="small")
    figure.tight_layout(rect=(0, 0.035 * legend_rows + 0.02, 1, 1))
    figures.save(figure, path)


def megabytes_sent(metrics):
    """MB sent by each logged step: every line's bytes per step times the steps since the line before."""
    total, previous, sent = 0.0, 0, []
    for m in metrics:
        total += m.get("bytes_sent_per_step", 0) * (m["step"] - previous) / 1e6
        previous = m["step"]
        sent.append(total)
    return sent


def repeat_name(row):
    """How a row names its repeat: r2, or its seed (--seeds)."""
    return f"r{row['repeat']}" if row["seed"] is None else f"seed {row['seed']}"
