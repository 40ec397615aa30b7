"""How much of a CPU's time the hypervisor gave to other machines while a block ran: /proc/stat's steal column,
read per CPU before and after. Timings made on a virtual machine are only as good as its CPUs were its own, and
a shaped link suffers most: its token bucket holds about two packets, so while the virtual CPU that runs its
timer is descheduled the bucket fills and the rest of that time's tokens are lost, and a link carries about
(1 - steal) of its rate (docs/launching.md, "Links"). summary.json records the share of the training steps
(`cpu_steal`); the link tests bound a stream by it. Free of TensorFlow."""

PROC_STAT = "/proc/stat"


def per_cpu(path=PROC_STAT):
    """{cpu: (steal, all) clock ticks since boot}; empty where there is no such file (not Linux)."""
    ticks: dict = {}
    try:
        with open(path, encoding="utf-8") as f:
            lines = f.read().splitlines()
    except OSError:
        return ticks
    for name, *fields in (line.split() for line in lines if line.strip()):
        if name.startswith("cpu") and name != "cpu":
            counts = [int(field) for field in fields[:8]]  # user nice system idle iowait irq softirq steal
            ticks[name] = (counts[7] if len(counts) == 8 else 0, sum(counts))
    return ticks


def largest_share(before, after):
    """The most any one CPU lost to steal between two readings, 0 to 1 (a link's timer runs on one CPU at a
    time, not spread over all): None where the readings say nothing."""
    shares = [
        (after[cpu][0] - steal) / (after[cpu][1] - total)
        for cpu, (steal, total) in before.items()
        if cpu in after and after[cpu][1] > total
    ]
    return max(shares) if shares else None


class Stolen:
    """`with Stolen() as stolen:` ... then `stolen.share`: largest_share over the block."""

    def __init__(self, path=PROC_STAT):
        self.path, self.share = path, None

    def __enter__(self):
        self._before = per_cpu(self.path)
        return self

    def __exit__(self, *_):
        self.share = largest_share(self._before, per_cpu(self.path))
        return False
