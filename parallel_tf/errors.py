"""The two kinds of failure a task reports, mapped to the exit codes docs/failures-and-security.md promises."""

import re


class ConfigError(Exception):
    """A user's mistake in flags, cluster spec or data: exit 2, one line, no traceback."""


class TaskFailure(Exception):
    """Something went wrong at run time (a peer vanished, a timeout): exit 1."""


def chief_did_not_initialise(startup_timeout):
    return TaskFailure(
        f"the chief (worker:0) did not initialise the model within --startup_timeout={startup_timeout:g}s"
    )


def one_line(error):
    """One line that says what a TensorFlow error was. TF 2.x's session errors start with 'Graph
    execution error:' and a Python traceback; the error itself comes last, before the '[[node ...]]'
    marker. A peer that has gone shows as gRPC's 'remote target /job:ps/replica:0/task:0', named here."""
    message = error.message or str(error)
    lines = [line.strip() for line in message.splitlines() if line.strip() and not line.strip().startswith("[[")]
    lines = [line for line in lines if not line.startswith("=====")]
    if not lines:
        return type(error).__name__
    gone = re.search(r"remote target /job:(\w+)/replica:\d+/task:(\d+)", message)
    if gone:
        reasons = [after for line, after in zip(lines, lines[1:]) if re.search(r"From /job:.*:$", line)]
        return f"{type(error).__name__}: lost contact with {gone[1]}:{gone[2]} ({reasons[0] if reasons else lines[-1]})"
    return f"{type(error).__name__}: {lines[-1]}"
