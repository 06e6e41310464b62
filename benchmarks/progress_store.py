"""What every rank's progress costs the job's store: 64 and 256 simulated ranks.

Run: ``python benchmarks/progress_store.py [RANKS ...]`` (default 64 256). One
``TCPStore`` server on loopback stands for the job's (rendezvous makes one for every
torch.distributed job); each simulated rank is a :class:`sysmetrics.progress.Channel`
with a client of its own, as each rank's hang watch has. Prints, per world size:

- the cost of one publish on the publishing (hang watch) thread: µs, median and p99 of
  every rank publishing 20 records (one ``set`` of about 120 bytes);
- the steady traffic that makes at the default cadence (``hang_after`` 60 s: one record
  per rank every ``publish_every(60)`` = 5 s): store ops/s and payload bytes/s (keys and
  values; TCP and the store's framing add some tens of bytes a call);
- rank 0's read of every record during a stall (one ``check`` per rank seen for the
  first time, then one ``multi_get``): ms and bytes, first and later reads.

The training thread never takes part: every call is on the hang watch's thread.
"""

from __future__ import annotations

import datetime
import statistics
import sys
import time


def measure(ranks: int) -> dict[str, float]:
    """The figures for ``ranks`` simulated ranks (see the module)."""
    import torch.distributed as dist

    from sysmetrics.hang import Where
    from sysmetrics.progress import Channel, publish_every

    server = dist.TCPStore(
        "127.0.0.1", 0, is_master=True, wait_for_workers=False,
        timeout=datetime.timedelta(seconds=30),
    )  # fmt: skip
    address = ("127.0.0.1", server.port)
    channels = [Channel(r, ranks, r // 8, 60.0, address) for r in range(ranks)]
    for c in channels:
        c.open()
    where = Where("collective", "all_reduce")
    costs = []
    for i in range(20):
        for c in channels:
            t = time.perf_counter()
            c.publish(1200 + i, "train", where, 0.0, force=True)
            costs.append(time.perf_counter() - t)
    sent = sum(c.bytes for c in channels)
    calls = sum(c.ops for c in channels)
    every = publish_every(60.0)
    reads = []
    for _ in range(3):
        before = channels[0].bytes
        t = time.perf_counter()
        records = channels[0].read()
        reads.append((time.perf_counter() - t, channels[0].bytes - before))
    assert all(r is not None for r in records.values())
    for c in channels:
        c.close()
    del server
    costs.sort()
    return {
        "publish_us": statistics.median(costs) * 1e6,
        "publish_p99_us": costs[int(0.99 * len(costs))] * 1e6,
        "ops_per_s": ranks / every,
        "bytes_per_s": sent / calls * ranks / every,
        "first_read_ms": reads[0][0] * 1e3,
        "read_ms": statistics.median(r[0] for r in reads[1:]) * 1e3,
        "read_bytes": reads[-1][1],
    }


def main() -> None:
    sizes = [int(a) for a in sys.argv[1:]] or [64, 256]
    print("ranks | publish µs (median, p99) | steady ops/s | steady bytes/s | "
          "rank 0 read ms (first, later) | read bytes")  # fmt: skip
    for n in sizes:
        m = measure(n)
        print(
            f"{n:5d} | {m['publish_us']:8.0f} {m['publish_p99_us']:8.0f} | "
            f"{m['ops_per_s']:12.1f} | {m['bytes_per_s']:14.0f} | "
            f"{m['first_read_ms']:10.1f} {m['read_ms']:8.1f} | {m['read_bytes']:10.0f}"
        )


if __name__ == "__main__":
    main()
