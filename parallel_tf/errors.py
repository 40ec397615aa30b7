"""The two kinds of failure a task reports, mapped to the exit codes DESIGN.md promises."""


class ConfigError(Exception):
    """A user's mistake in flags, cluster spec or data: exit 2, one line, no traceback."""


class TaskFailure(Exception):
    """Something went wrong at run time (a peer vanished, a timeout): exit 1."""
