"""The share of a CPU's time the hypervisor took (training/cpu_steal.py), read from /proc/stat's layout, worked
by hand, and said where it is large enough to matter."""

import logging

import pytest

from parallel_tf.training import cpu_steal, run_summary

pytestmark = pytest.mark.inprocess

# /proc/stat's lines: the sum over CPUs first, then each CPU: user nice system idle iowait irq softirq steal
# guest guest_nice, in clock ticks since boot
BEFORE = """cpu  300 0 100 1590 0 0 0 10 0 0
cpu0 200 0 50 740 0 0 0 10 0 0
cpu1 100 0 50 850 0 0 0 0 0 0
intr 12345
"""
# 100 ticks later on each CPU: cpu0 lost 50 of them to steal, cpu1 10
AFTER = """cpu  340 0 110 1680 0 0 0 70 0 0
cpu0 220 0 55 765 0 0 0 60 0 0
cpu1 120 0 55 915 0 0 0 10 0 0
intr 12399
"""


def test_the_share_is_the_most_stolen_cpus_steal_over_its_ticks(tmp_path):
    """cpu0: (60 - 10) / (1100 - 1000) = 0.5; cpu1: 10 / 100 = 0.1: the largest, 0.5. The sum line is not a CPU."""
    stat = tmp_path / "stat"
    stat.write_text(BEFORE)
    assert cpu_steal.per_cpu(stat) == {"cpu0": (10, 1000), "cpu1": (0, 1000)}
    with cpu_steal.Stolen(stat) as stolen:
        stat.write_text(AFTER)
    assert stolen.share == 0.5


def test_no_reading_says_nothing_rather_than_none_stolen(tmp_path):
    with cpu_steal.Stolen(tmp_path / "absent") as stolen:
        pass
    assert stolen.share is None
    assert cpu_steal.largest_share({"cpu0": (5, 100)}, {"cpu0": (5, 100)}) is None  # no tick passed


def test_a_share_above_a_twentieth_is_said_in_one_line(caplog):
    with caplog.at_level(logging.WARNING):
        run_summary.warn_of_steal(0.04)
        run_summary.warn_of_steal(None)
        assert not caplog.records
        run_summary.warn_of_steal(0.23)
    (record,) = caplog.records
    assert record.getMessage().startswith("the hypervisor took 23% of a CPU's time while this run trained")
