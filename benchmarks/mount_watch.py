"""Cost of placing ``disk_paths`` by the mount table and watching it for changes.

Run: ``python benchmarks/mount_watch.py`` (Linux). Prints, measured side by side in this
one run (µs per call, the median of 9 runs whose calls alternate):

1. the disk collector's ``sample()`` of two local paths with the mount table watched (one
   ``poll`` and one ``fstat`` of ``/proc/self/mountinfo`` a sample), beside the same
   collector placed once without a watch; and the watch's check alone;
2. what a change of the table costs (at most once a second): reading it again and placing
   the paths, for this machine's table and for a synthetic one of 2,000 mounts;
3. the existence check of a ``disk_paths`` entry at construction: ``os.path.exists``
   alone (before) beside the mount table's placement and then ``exists`` (now);
4. a statfs helper's round trip over a socket pair (``send`` with ``MSG_NOSIGNAL``),
   beside the same helper spoken to over two pipes (before), and ``StatfsProbe.usage()``
   asking at every call (its select, parsing and clock included).
"""

from __future__ import annotations

import argparse
import os
import socket
import subprocess
import sys
import tempfile

from host_sample import per_call_us

from sysmetrics._checks import missing_here
from sysmetrics.collectors import DiskCollector
from sysmetrics.host import MountWatch, ProcfsSource, StatfsProbe
from sysmetrics.host.statfs import _HELPER, _mounts, _path_type


def ratio(what: str, us: float, base: float) -> None:
    print(f"   {what:<52}{us:>10.2f}{us / base:>10.2f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--number", type=int, default=2000, help="calls per timed run")
    n = parser.parse_args().number
    here = os.getcwd()
    paths = ["/", here]
    source = ProcfsSource()

    watched = DiskCollector(source, paths)
    fixed = DiskCollector(source, paths, probe=lambda p: None)
    watch = MountWatch()
    try:
        plain, with_watch, check = per_call_us(
            fixed.sample, watched.sample, watch.changed, number=n
        )
    finally:
        watched.close()
        fixed.close()
    print(f"1. disk sample of {len(paths)} local paths ({os.cpu_count()} CPUs)")
    print(f"   {'what':<52}{'µs':>10}{'ratio':>10}")
    ratio("sample(), placed once (no watch)", plain, plain)
    ratio("sample(), mount table watched", with_watch, plain)
    ratio("the watch's check alone (poll + fstat)", check, plain)

    table = watch.read() or ""
    big = "".join(
        f"{100 + i} 27 0:{i} / /mnt/m{i} rw - {'nfs4' if i % 2 else 'ext4'} s:/e{i} rw\n"
        for i in range(2000)
    )
    lines = len(table.splitlines())
    reread, place_here, place_big = per_call_us(
        watch.read,
        lambda: [_path_type(p, _mounts(table)) for p in paths],
        lambda: [_path_type(p, _mounts(big + table)) for p in paths],
        number=max(1, n // 20),
    )
    watch.close()
    print(f"\n2. a change of the mount table (at most once a second), {len(paths)} paths")
    ratio(f"read /proc/self/mountinfo ({lines} mounts)", reread, plain)
    ratio(f"parse and place ({lines} mounts)", place_here, plain)
    ratio(f"parse and place ({lines + 2000} mounts)", place_big, plain)

    exists, placed = per_call_us(
        lambda: os.path.exists(here), lambda: missing_here(here), number=max(1, n // 10)
    )
    print("\n3. the existence check of one disk_paths entry, at construction")
    ratio("os.path.exists (before)", exists, exists)
    ratio("placed by the mount table, then exists (now)", placed, exists)

    with tempfile.TemporaryDirectory() as d:
        command = [sys.executable, "-I", "-S", "-c", _HELPER, d]
        pipe = subprocess.Popen(
            command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL
        )
        ours, theirs = socket.socketpair()
        paired = subprocess.Popen(
            command, stdin=theirs.fileno(), stdout=theirs.fileno(), stderr=subprocess.DEVNULL
        )
        theirs.close()
        probe = StatfsProbe(d, every=0.0)
        assert pipe.stdin is not None and pipe.stdout is not None
        fd_in, fd_out = pipe.stdin.fileno(), pipe.stdout.fileno()

        def over_pipes() -> None:
            os.write(fd_in, b"\n")
            while not os.read(fd_out, 4096).endswith(b"\n"):
                pass

        def over_socket() -> None:
            ours.send(b"\n", socket.MSG_NOSIGNAL)
            while not ours.recv(4096).endswith(b"\n"):
                pass

        try:
            assert probe.usage() is not None
            piped, sent, used = per_call_us(
                over_pipes, over_socket, probe.usage, number=max(1, n // 4)
            )
        finally:
            probe.close()
            ours.close()
            for proc in (pipe, paired):
                proc.kill()
                proc.communicate()
    print("\n4. a statfs helper's round trip (request written, answer read)")
    ratio("two pipes, os.write and os.read (before)", piped, piped)
    ratio("socket pair, send(MSG_NOSIGNAL) and recv (now)", sent, piped)
    ratio("StatfsProbe.usage() asking at every call (now)", used, piped)


if __name__ == "__main__":
    main()
