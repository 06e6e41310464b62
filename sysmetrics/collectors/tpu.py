"""Google Cloud TPUs through the ``tpu-info`` CLI: ``tpu.{i}.*``."""

from __future__ import annotations

import contextlib
import glob
import logging
import os
import re
import shutil
import subprocess

from sysmetrics.collectors._values import BYTES, PERCENT, checked, kept
from sysmetrics.collectors.base import BackgroundCollector

log = logging.getLogger("sysmetrics")

GOOGLE_PCI_VENDOR = "0x1ae0"
PCI_ROOT = "/sys/bus/pci/devices"
TIMEOUT_S = 30.0

_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
_CELL_SPLIT = re.compile(r"[|│┃]")
_SIZE = re.compile(r"([0-9.]+)\s*([KMGT]?i?B)\s*/\s*([0-9.]+)\s*([KMGT]?i?B)")
_UNITS = {"B": 1, "KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30, "TiB": 1 << 40,
          "KB": 10**3, "MB": 10**6, "GB": 10**9, "TB": 10**12}  # fmt: skip
# Tables that carry the catalogue's values; any other title ends the current table.
_TABLES = {"TPU Runtime Utilization": "both", "TPU HBM Usage": "hbm", "TPU Duty Cycle": "duty"}
_RANGES = {"memoryUsageBytes": BYTES, "memoryUsage": PERCENT, "dutyCycle": PERCENT}


def parse_tpu_info(text: str) -> dict[str, float]:
    """Catalogue keys from ``tpu-info`` output (its static, streaming or ``--metric`` tables).

    Keys per chip id ``i`` (the runtime's device id, as tpu-info prints it):
    ``tpu.{i}.memoryUsageBytes`` (HBM in use, bytes; tpu-info prints GiB with two
    decimals, so about 10 MB resolution), ``tpu.{i}.memoryUsage`` (HBM in use over HBM
    total, %), ``tpu.{i}.dutyCycle`` (% of time the TensorCores were busy). Rows may be
    drawn with ``|`` or with box characters; other tables and text are ignored.

    Never raises: rows it cannot read are skipped, and values out of range are left out
    (one debug line each): % outside 0..100, bytes outside 0..2**64, NaN or infinite.
    """
    out: dict[str, float] = {}
    table: str | None = None
    for raw in _ANSI.sub("", text).splitlines():
        line = raw.strip()
        if not line:
            continue
        if not _CELL_SPLIT.search(line):  # a title, or text between tables
            if not set(line) <= set("-─━┏┓┗┛┡┩└┘┳┻╇┴╭╮╰╯═╞╡╪ "):
                table = _TABLES.get(line)
            continue
        cells = [c.strip() for c in _CELL_SPLIT.split(line) if c.strip()]
        if table is None or len(cells) < 2 or not re.fullmatch(r"[0-9]{1,9}", cells[0]):
            continue  # header or rule rows
        prefix = f"tpu.{int(cells[0])}."
        values: dict[str, float | None] = {}
        m = _SIZE.search(cells[1]) if table in ("both", "hbm") else None
        if m and m.group(2) in _UNITS and m.group(4) in _UNITS:
            with contextlib.suppress(ValueError):  # a number such as "1.2.3"
                used = checked(
                    prefix + "memoryUsageBytes", float(m.group(1)) * _UNITS[m.group(2)], BYTES
                )
                total = checked(prefix + "HBM total", float(m.group(3)) * _UNITS[m.group(4)], BYTES)
                values["memoryUsageBytes"] = used
                if used is not None and total:
                    values["memoryUsage"] = used / total * 100.0
        duty = cells[-1] if table == "both" else cells[1] if table == "duty" else None
        if duty is not None and duty.endswith("%"):
            with contextlib.suppress(ValueError):
                values["dutyCycle"] = float(duty[:-1])
        out.update(kept(prefix, values, _RANGES))
    return out


def has_tpu(pci_root: str = PCI_ROOT) -> bool:
    """Whether a Google PCI device (a TPU chip) is present; reads sysfs, loads nothing."""
    for vendor in glob.glob(os.path.join(pci_root, "*", "vendor")):
        try:
            with open(vendor) as f:
                if f.read().strip().lower() == GOOGLE_PCI_VENDOR:
                    return True
        except OSError:
            continue
    return False


class TPUCollector(BackgroundCollector):
    """Google TPU metrics from ``tpu-info`` (keys: see :func:`parse_tpu_info`).

    ``tpu-info`` reads the TPU runtime's metrics service (gRPC on localhost:8431, served
    by libtpu inside the training process). It runs every ``poll_interval`` seconds on
    the collector's own thread, as each run starts a Python program that talks gRPC (too
    heavy for every tick). Before the training process has opened the TPU there is
    nothing to read and no keys. sysmetrics itself never imports libtpu, JAX or torch_xla.

    A run that fails (cannot start, times out, exits non-zero) costs one warning; the
    collector keeps trying.

    Args:
        path: the ``tpu-info`` executable.
        poll_interval: seconds between runs.

    """

    name = "tpu"
    thread_name = "sysmetrics-tpu"

    def __init__(self, path: str, poll_interval: float = 10.0) -> None:
        super().__init__()
        self.command = [path]
        self.poll_interval = poll_interval
        # A reading is current until the next run is overdue (a run takes up to TIMEOUT_S).
        self.stale_after = poll_interval + TIMEOUT_S + 5.0

    @classmethod
    def create(cls, pci_root: str = PCI_ROOT) -> TPUCollector | None:
        """The collector where a TPU chip is on the PCI bus and ``tpu-info`` is on PATH.

        Otherwise None, with one debug line (never a warning).
        """
        if not has_tpu(pci_root):
            log.debug("sysmetrics: TPU collector unavailable: no Google TPU on the PCI bus")
            return None
        found = shutil.which("tpu-info")
        if found is None:
            log.debug("sysmetrics: TPU collector unavailable: no tpu-info on PATH")
            return None
        return cls(found)

    def read(self) -> dict[str, float]:
        """Run ``tpu-info`` once and parse what it printed.

        Raises:
            OSError: it cannot be started.
            subprocess.TimeoutExpired: it ran past 30 s (its process group is killed).
            RuntimeError: it exited non-zero, or printed over 16 MiB.

        """
        returncode, stdout, stderr = self._tool.run(self.command, TIMEOUT_S)
        if returncode != 0:
            raise RuntimeError(f"exited with {returncode}: {stderr.strip()[-300:]}")
        return parse_tpu_info(stdout)

    def _run(self) -> None:
        errors = (OSError, RuntimeError, subprocess.SubprocessError)
        self._poll(self.read, self.command[0], errors, self.poll_interval)
