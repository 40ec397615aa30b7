"""What every entry point does with a user's mistake: one line on stderr, exit code 2.

absl's own parser exits 1 with a usage dump; these replace it. Free of TensorFlow, so the
launcher can use them without paying for a TF import.
"""

import difflib
import math
import re
import sys

from absl import flags

from parallel_tf.backports import removeprefix
from parallel_tf.errors import ConfigError

CHECKED_DATASET = "dataset="  # what a task's --check_flags prints: the dataset it would read (the launcher asks)


def exit_config_error(message):
    print(f"error: {message}", file=sys.stderr)
    sys.exit(2)


HELP = {"--help", "-help", "-h", "-?", "--helpshort"}
# --help's sections past a command's own flags, added by the layer that defines those flags (run_flags.py), so
# this module names none of them: each a callable giving [(heading or None, [(title, defining module)])]
HELP_SECTIONS: list = []


def parse_flags_or_exit(argv, known_only=False, command="__main__", hints=None):
    """An absl flags_parser. With known_only, unknown flags stay in the returned argv. `command`: the
    name of the module that defines the command's own flags and describes it (--help). `hints`: {a flag the
    command does not have: what to give instead}, said with its refusal."""
    if HELP & set(argv[1:]):
        print_help_and_exit(command)
    if "--helpfull" in argv[1:]:
        print(flags.FLAGS.get_help())
        sys.exit(0)
    try:
        return flags.FLAGS(argv, known_only=known_only)
    except flags.UnrecognizedFlagError as e:
        exit_config_error(unknown_flag(e.flagname, list(flags.FLAGS), hints))
    except flags.Error as e:
        exit_config_error(str(e))


UNKNOWN_FLAG = re.compile(r"unknown flag --(\S+?)(?: \(did you mean (.+)\?\))?$")


def unknown_flag(name, known, hints=None, suggested=()):
    """The one line that refuses --`name`, a flag the command does not know: what to give instead where `hints`
    says so, else the flags of `known` (and `suggested`, names another command offered) that are closest."""
    if hints and name in hints:
        return f"unknown flag --{name}: {hints[name]}"
    close = difflib.get_close_matches(name, [*dict.fromkeys([*suggested, *known])], n=3, cutoff=0.7)
    return f"unknown flag --{name}" + (
        f" (did you mean {' or '.join('--' + flag for flag in close)}?)" if close else ""
    )


def print_help_and_exit(command="__main__"):
    """--help: the usage of `command` (its module's docstring) and every flag its user can give, on
    stdout, exit 0: its own, then HELP_SECTIONS' (the run flags it passes on, each option's and technique's
    under its name and the modes it applies to). absl's --help exits 1 and lists only the flags the
    command's own module defines, leaving the rest to --helpfull."""
    key = sys.argv[0] if command == "__main__" else command  # how absl names the module that defined a flag
    print((sys.modules[command].__doc__ or "").strip())
    by_module = flags.FLAGS.flags_by_module_dict()
    print(f"\nflags of this command:{_flags_of(key)}" if key in by_module else "")
    for heading, entries in (section for sections in HELP_SECTIONS for section in sections()):
        shown = [(title, module) for title, module in entries if module in by_module]
        if heading and shown:
            print(f"\n{heading}")
        for title, module in shown:  # under a heading indented, else each a section of its own
            print(f"  {title}:{_flags_of(module, indent='  ')}" if heading else f"\n{title}:{_flags_of(module)}")
    if "job_name" not in flags.FLAGS:  # a tool that starts a recipe's tasks, not a task itself
        print("\nA recipe's own flags (--model, --dataset, ...): .venv/bin/python recipes/<recipe>.py --help")
    print("\n--helpfull lists every flag, absl's and TensorFlow's included.")
    sys.exit(0)


def _flags_of(module, indent=""):
    """absl's help for the flags `module` defines, without the line naming the module."""
    lines = flags.FLAGS.module_help(module).strip("\n").splitlines()[1:]
    return "".join(f"\n{indent}{line}" for line in lines)


def validate_by_parsing(name, parse, flag_values=flags.FLAGS):
    """An absl validator for flag `name`: its value must pass `parse`, which raises ConfigError naming
    the flag. A bad value is then refused as absl parses the flags, in `parse`'s words, by every
    command that defines the flag (a task, the launcher, the tools), before anything starts."""

    def parses(value):
        try:
            parse(value)
        except ConfigError as e:
            raise flags.ValidationError(removeprefix(str(e), f"--{name}={value}: ")) from None
        return True

    flags.register_validator(name, parses, flag_values=flag_values)


def define_float(name, default, help, lower_bound=None, upper_bound=None, flag_values=flags.FLAGS, module_name=None):
    """absl's DEFINE_float that also refuses nan and inf at parse: a bound does not (nan compares false with
    everything), and either would train to NaN, or turn a check off, and exit 0."""
    defined_by = module_name or sys._getframe(1).f_globals["__name__"]  # --help groups flags by their module
    flags.DEFINE_float(name, default, help, lower_bound, upper_bound, flag_values=flag_values, module_name=defined_by)
    flags.register_validator(name, _finite, "must be a finite number", flag_values=flag_values)


def _finite(value):
    return value is None or math.isfinite(value)


def duration(seconds):
    """'1.5 h', '2.0 min', '12 s', '0.467 ms': a time in the unit that shows it."""
    if seconds >= 3600:
        return f"{seconds / 3600:.1f} h"
    if seconds >= 60:
        return f"{seconds / 60:.1f} min"
    return f"{seconds:.0f} s" if seconds >= 10 else f"{seconds:.3g} s" if seconds >= 1 else f"{seconds * 1000:.3g} ms"


def counted(count, noun, plural=None):
    """'1 task', '3 tasks': a count with its noun, in the number it takes."""
    return f"{count} {noun if count == 1 else plural or noun + 's'}"


def positive_ints(flag, values):
    """A list flag's values as positive integers; ConfigError naming the flag otherwise."""
    numbers = []
    for value in values:
        if not value.strip().isdigit() or int(value) < 1:
            raise ConfigError(f"--{flag}: {value!r} is not a positive integer")
        numbers.append(int(value))
    return numbers
