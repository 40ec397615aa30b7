"""`python -m parallel_tf.study`: runs a study: modes, worker counts and seeds side by side (tools/study.py)."""

from parallel_tf.tools import study

if __name__ == "__main__":
    study.run_command_line()
