"""--link_rate=R[, --link_delay=MS, --link_loss=P] (every cluster mode): the network a local cluster runs on. The
launcher puts every task on a simulated host of its own (or as --simulate_hosts lays them out) and
shapes each host's interface at R in both directions with a token bucket (tc's tbf), its bucket a
200 µs burst at R (at least 3000 bytes) so that a step's messages are paced rather than let
through; traffic inside one host stays unshaped, as on a real machine. --link_delay adds that much
one-way delay to what each host sends, with netem where the kernel has it and else our delay line of
netfilter queues; --link_loss drops that share of the packets each host receives (launch/hosts.py). The
arithmetic does not change; the time does, which is what a study of communication measures. Only the
launcher shapes a network: a task refuses the flag unless the launcher set its link (on Slurm, a TFJob
or a cluster started by hand the network is real). summary.json records the link under `declared`, with
what delayed it, run.json the one a run started on (logdir.DESCRIBED: a resume may run on another)."""

import os
import re

from absl import logging

from parallel_tf import cli
from parallel_tf.errors import ConfigError
from parallel_tf.training.declarations import EVERY_CLUSTER_MODE, Flags, Option, flag

UNITS = {"kbit": 1e3, "mbit": 1e6, "gbit": 1e9}
SHAPED_ENV = "PARALLEL_TF_SHAPED_LINK"  # the launcher's word to a task that its link is shaped at this rate
DELAY_BY_ENV = "PARALLEL_TF_LINK_DELAY_BY"  # and what delays it: netem, or the delay line


def say_what_it_costs(crossing, rate, train_steps):
    """A slow --link_rate can stretch a run to hours without a word: once the chief's first run of steps has told
    what a step sends (`crossing`: traffic.Meter.mean's bytes a step each way), it says what a link at `rate` makes
    of it at least (its bytes over the rate), a step and the run's `train_steps`."""
    bits = 8 * max(crossing["bytes_sent_per_step"], crossing["bytes_received_per_step"])
    seconds = bits / bits_per_second(rate)
    logging.info(
        "the chief's link carries %d bytes a step each way at most: at %s, at least %s a step, %s for the %d steps",
        bits // 8,
        rate,
        cli.duration(seconds),
        cli.duration(seconds * train_steps),
        train_steps,
    )


def bits_per_second(rate, flag="link_rate"):
    """100mbit -> 1e8; ConfigError naming `flag` for anything else."""
    match = re.fullmatch(r"(\d+(?:\.\d+)?)(kbit|mbit|gbit)", rate)
    if not match or float(match[1]) <= 0:
        raise ConfigError(f"--{flag}={rate}: expected a rate such as 100mbit, 1gbit or 10gbit (kbit, mbit, gbit)")
    return float(match[1]) * UNITS[match[2]]


def described(rate, delay_ms, loss):
    """The link a run had, for summary.json and run.json: its rate, its delay and what made it (the launcher's
    word), its loss."""
    return {
        "link_rate": rate,
        "bits_per_second": bits_per_second(rate),
        "link_delay_ms": delay_ms,
        **({"link_delay_by": os.environ.get(DELAY_BY_ENV)} if delay_ms else {}),
        "link_loss": loss,
    }


def record(settings):
    return described(settings.options.link_rate, settings.options.link_delay, settings.options.link_loss)


def check(values, cluster):
    """An all-reduce cluster of one worker sends nothing over any link: a shaped one would change nothing."""
    if values["link_rate"] and cluster and not cluster.num_ps and cluster.num_workers == 1:
        raise ConfigError(
            f"--link_rate={values['link_rate']} with one all-reduce worker: nothing crosses a link, so shaping "
            "it changes nothing; leave it out or run more workers"
        )


class Options(Flags):
    link_rate: str = flag(
        "",
        "Local clusters: every simulated host's network interface shaped at this rate each way (100mbit, 1gbit, "
        "...); each task on a host of its own unless --simulate_hosts lays them out. Empty: an unshaped network.",
        parse=lambda rate: rate and bits_per_second(rate),
    )
    link_delay: float = flag(
        0.0,
        "With --link_rate: one-way delay in milliseconds added to what every host sends (netem where the kernel "
        "has it, else a delay line of netfilter queues, which needs iptables), so a round trip is twice it.",
        lower_bound=0.0,
    )
    link_loss: float = flag(
        0.0,
        "With --link_rate: the share of packets every host's interface drops as they arrive, at random (0.01: "
        "1%; iptables' statistic match). TCP sends them again, so only the time changes.",
        lower_bound=0.0,
        upper_bound=0.5,
    )


OPTION = Option(name="link", modes=EVERY_CLUSTER_MODE, options=Options, check=check, record=record, timing_only=True)


def check_shaped(settings, environ):
    """A task's check that the launcher shaped its link as --link_rate says (ConfigError otherwise)."""
    rate = settings.options.link_rate
    if rate and environ.get(SHAPED_ENV) != rate:
        raise ConfigError(
            f"--link_rate={rate}: only the launcher shapes a link, on the simulated hosts it makes; "
            "on Slurm, a TFJob or a cluster started by hand the network is real: leave --link_rate out"
        )
