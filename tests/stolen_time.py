"""The share of a CPU's time its hypervisor gave to other machines while a block ran: /proc/stat's steal
column, read per CPU before and after. A shaped link's token bucket holds about two packets, so while the
virtual CPU that runs its timer is descheduled the bucket fills and the rest of that time's tokens are lost: a
stream then carries about (1 - stolen) of the rate. The link tests bound a stream by that much less, and print
the share beside the rate they measured."""


def _per_cpu():
    """Each CPU's (steal, all) clock ticks since boot."""
    ticks = {}
    with open("/proc/stat", encoding="utf-8") as f:
        for line in f:
            name, *fields = line.split()
            if name.startswith("cpu") and name != "cpu":
                counts = [int(field) for field in fields[:8]]  # user nice system idle iowait irq softirq steal
                ticks[name] = (counts[7], sum(counts))
    return ticks


class Stolen:
    """`with Stolen() as stolen:` ... then `stolen.share`: the most any one CPU lost to steal, 0 to 1 (the
    timer that paces a link runs on one CPU at a time, not spread over both)."""

    def __enter__(self):
        self._before, self.share = _per_cpu(), 0.0
        return self

    def __exit__(self, *_):
        after = _per_cpu()
        shares = [
            (after[cpu][0] - steal) / max(1, after[cpu][1] - total) for cpu, (steal, total) in self._before.items()
        ]
        self.share = max(shares, default=0.0)
        return False
