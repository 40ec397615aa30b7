"""What every entry point does with a user's mistake: one line on stderr, exit code 2.

absl's own parser exits 1 with a usage dump; these replace it. Free of TensorFlow, so the
launcher can use them without paying for a TF import.
"""

import sys

from absl import flags

from parallel_tf.errors import ConfigError


def exit_config_error(message):
    print(f"error: {message}", file=sys.stderr)
    sys.exit(2)


def parse_flags_or_exit(argv, known_only=False):
    """An absl flags_parser. With known_only, unknown flags stay in the returned argv."""
    try:
        return flags.FLAGS(argv, known_only=known_only)
    except flags.Error as e:
        exit_config_error(str(e))


def positive_ints(flag, values):
    """A list flag's values as positive integers; ConfigError naming the flag otherwise."""
    numbers = []
    for value in values:
        if not value.strip().isdigit() or int(value) < 1:
            raise ConfigError(f"--{flag}: {value!r} is not a positive integer")
        numbers.append(int(value))
    return numbers
