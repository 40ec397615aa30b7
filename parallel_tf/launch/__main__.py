"""`python -m parallel_tf.launch`: runs a recipe's cluster on this machine (launch/launcher.py)."""

from parallel_tf.launch import launcher

launcher.run_command_line()
