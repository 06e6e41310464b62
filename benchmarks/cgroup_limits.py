"""Cost of keeping the cgroup limits current (``Cgroup.refresh_s``).

Run: ``python benchmarks/cgroup_limits.py`` (Linux). Prints, measured side by side in
this one run, for this process's cgroup and for a Kubernetes-like cgroup v2 tree five
levels deep (in a temporary folder):

1. one reading of the three limits (CPU quota, memory and swap limit) from the files;
2. the same calls answered from the latest reading (within ``refresh_s``);
3. the resulting cost per second of keeping them current at ``LIMITS_REFRESH_S``, as a
   share of a core, whatever the sampling interval.
"""

from __future__ import annotations

import os
import sys
import tempfile

from benchmarks.host_sample import per_call_us
from sysmetrics.cgroup import LIMITS_REFRESH_S, Cgroup, find_cgroup


def deep_v2_tree(root: str) -> Cgroup:
    """kubepods/burstable/pod/ctr under a v2 root, every level with its limits."""
    dirs = [root]
    for name in ("kubepods.slice", "burstable.slice", "pod1.slice", "ctr.scope"):
        dirs.append(os.path.join(dirs[-1], name))
        os.mkdir(dirs[-1])
    for d in dirs:
        for name, text in (("cpu.max", "200000 100000"), ("memory.max", str(8 << 30)),
                           ("memory.swap.max", "max")):  # fmt: skip
            with open(os.path.join(d, name), "w") as f:
                f.write(text + "\n")
    inner_first = dirs[::-1]
    return Cgroup(2, memory_dirs=inner_first, cpu_dirs=inner_first)


def read_all(cg: Cgroup) -> None:
    cg.cpu_limit()
    cg.memory_limit()
    cg.swap_limit()


def main() -> None:
    if not sys.platform.startswith("linux"):
        sys.exit("needs Linux")
    with tempfile.TemporaryDirectory() as tmp:
        trees = {"this process": find_cgroup(), "v2, 5 levels": deep_v2_tree(tmp)}
        for label, cg in trees.items():
            if cg is None:
                print(f"{label}: no cgroup here")
                continue
            fresh = Cgroup(cg.version, cg.memory_dirs, cg.cpu_dirs, refresh_s=0.0)
            cached = Cgroup(cg.version, cg.memory_dirs, cg.cpu_dirs)
            read_us, cached_us = per_call_us(
                lambda c=fresh: read_all(c), lambda c=cached: read_all(c), number=2000
            )
            share = read_us / 1e6 / LIMITS_REFRESH_S * 100
            print(
                f"{label} ({len(cg.cpu_dirs)} cpu, {len(cg.memory_dirs)} memory levels): "
                f"reading the limits {read_us:.1f} us, from the latest reading "
                f"{cached_us:.2f} us (x{read_us / cached_us:.0f}); every "
                f"{LIMITS_REFRESH_S:g} s: {share:.3f} % of a core"
            )


if __name__ == "__main__":
    main()
