"""The cost of the findings' rules over a 24-hour run, whole and per rule, beside reading it.

Run: ``python benchmarks/findings_cost.py`` (``--samples``, ``--gpus``). It writes the run
file of ``record_report.py`` (a single-GPU workstation's keys at 1 s, with steps) plus the
step keys (``step.seconds``, ``step.dataWaitPercent`` every other sample), reads it with
``read_run`` and times, in one run, side by side: reading it, ``findings(run)``, and each
rule alone; then ``findings`` over the first tenth of the run (what a live caller pays
early on). The rules are one pass each over the samples (no quadratic work): the ratio
of the whole run's cost to the tenth's stays near 10.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from record_report import generate

from sysmetrics import findings as fd


def with_steps(path: str) -> None:
    """Add the step keys to every other sample of the run file at ``path``."""
    out = path + ".steps"
    with open(path) as src, open(out, "w") as dst:
        for n, line in enumerate(src):
            record = json.loads(line)
            if n % 2:
                record["metrics"]["step.seconds"] = 0.5 + 0.1 * (n % 7)
                record["metrics"]["step.dataWaitPercent"] = 10.0 + (n % 13)
            dst.write(json.dumps(record, separators=(",", ":")) + "\n")
    os.replace(out, path)


def timed(fn: object, *args: object) -> tuple[float, object]:
    t = time.perf_counter()
    result = fn(*args)  # type: ignore[operator]
    return time.perf_counter() - t, result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gpus", type=int, default=1)
    parser.add_argument("--samples", type=int, default=86_400)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "day.jsonl")
        keys = generate(path, args.samples, args.gpus)
        with_steps(path)
        read_s, run = timed(fd.read_run, path)
        assert isinstance(run, fd.Run)
        all_s, found = timed(fd.findings, run)
        tenth = run.select(range(len(run) // 10))
        tenth_s, _ = timed(fd.findings, tenth)
        print(f"{len(run)} samples, {keys + 2} keys, {args.gpus} GPU(s)")
        print(f"  read_run      {read_s:6.2f} s")
        print(f"  findings      {all_s:6.2f} s = {all_s / read_s:.2f} x read_run "
              f"({[f.rule for f in found]})")  # type: ignore[attr-defined]  # fmt: skip
        print(f"  first tenth   {tenth_s:6.2f} s: whole / tenth = {all_s / tenth_s:.1f}")
        for rule in (*fd.RULES, *fd.NODE_RULES):
            rule_s, _ = timed(rule, run)
            print(f"    {rule.code:<16} {rule_s:6.3f} s")


if __name__ == "__main__":
    main()
