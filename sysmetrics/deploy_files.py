"""The Grafana dashboard and Prometheus alerting rules shipped in the package.

Their one home is ``sysmetrics/deploy/`` (package data: a wheel carries them), so a user
who installed with pip gets them with ``sysmetrics deploy grafana|prometheus-rules [DIR]``
(:func:`write`), and the tests read the same files (:func:`path`).
"""

from __future__ import annotations

import contextlib
import errno
import os
from importlib import resources
from pathlib import Path

# What `sysmetrics deploy TARGET` writes: the files under sysmetrics/deploy/, by target.
TARGETS: dict[str, tuple[str, ...]] = {
    "grafana": ("grafana/sysmetrics-dashboard.json",),
    "prometheus-rules": (
        "prometheus/sysmetrics-rules.yml",
        "prometheus/sysmetrics-rules.test.yml",  # promtool test rules: the rules' unit tests
    ),
}
MAX_BYTES = 1 << 20  # read of a file found in DIR: a shipped one is under 64 KiB


def read(name: str) -> bytes:
    """The shipped file ``name`` (a path under ``sysmetrics/deploy/``, as in :data:`TARGETS`)."""
    found = resources.files("sysmetrics") / "deploy"
    for part in name.split("/"):  # joinpath takes one part before Python 3.11
        found = found / part
    return found.read_bytes()


def path(name: str) -> Path:
    """The shipped file ``name`` on disk (for the tests).

    The package is a folder where it runs from a checkout or a wheel that pip installed.
    """
    return Path(__file__).resolve().parent / "deploy" / name


def write(target: str, directory: str | os.PathLike[str] = ".", force: bool = False) -> list[str]:
    """Write the files of ``target`` (a key of :data:`TARGETS`) into ``directory``.

    The directory is created where missing. A file there that differs from the shipped one
    is replaced only with ``force``; one equal to it is left as it is.

    Returns:
        The paths written (or found equal), in :data:`TARGETS`' order.

    Raises:
        ValueError: ``target`` is not one of :data:`TARGETS`, or a file differs and
            ``force`` is false (nothing is written then).
        OSError: the directory cannot be made, or a file cannot be written.

    """
    if target not in TARGETS:
        raise ValueError(f"{target!r} is not one of {', '.join(TARGETS)}")
    folder = Path(directory)
    if folder.exists() and not folder.is_dir():
        raise NotADirectoryError(errno.ENOTDIR, os.strerror(errno.ENOTDIR), str(folder))
    files = [(folder / name.rsplit("/", 1)[-1], read(name)) for name in TARGETS[target]]
    if not force:
        differ = [str(p) for p, data in files if p.exists() and _content(p) != data]
        if differ:
            raise ValueError(
                f"{', '.join(differ)} exists and differs from the shipped file: "
                "give --force to replace it, or another directory"
            )
    folder.mkdir(parents=True, exist_ok=True)
    written = []
    for target_path, data in files:
        if not (target_path.exists() and _content(target_path) == data):
            tmp = target_path.with_name(f".{target_path.name}.{os.getpid()}.tmp")
            try:
                tmp.write_bytes(data)
                os.replace(tmp, target_path)  # never a half-written file in its place
            finally:
                with contextlib.suppress(OSError):
                    tmp.unlink()
        written.append(str(target_path))
    return written


def _content(p: Path) -> bytes | None:
    """What ``p`` holds (its first :data:`MAX_BYTES` + 1 bytes), None where it is no file."""
    if not p.is_file():
        return None
    with open(p, "rb") as f:
        return f.read(MAX_BYTES + 1)
