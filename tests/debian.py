"""Debian packages the tests run for real (Prometheus, node exporter, Chromium).

Where the binary is missing, :func:`binary` installs the package with apt-get, but only
under CI (``CI`` set) and as root: that is the test setup CI relies on. Elsewhere the
tests that need it skip with the reason.
"""

from __future__ import annotations

import os
import shutil
import subprocess


def binary(package: str, *names: str) -> str | None:
    """The path of the first of ``names`` on PATH, installing ``package`` under CI."""

    def found() -> str | None:
        return next((path for name in names if (path := shutil.which(name))), None)

    path = found()
    if path or not os.environ.get("CI") or os.geteuid() != 0 or not shutil.which("apt-get"):
        return path
    # Only the package: its service (where it has one) is not started, as there is no
    # systemd under CI, and each test runs the binary itself with its own configuration.
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    install = ["apt-get", "install", "-y", "-qq", "--no-install-recommends", package]
    for cmd in (["apt-get", "update", "-qq"], install):
        subprocess.run(cmd, env=env, capture_output=True, timeout=900, check=False)
    return found()
