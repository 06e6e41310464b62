"""Disk usage of filesystems that may hang (network, FUSE): ``statfs`` in a helper process.

Also where a path's filesystem type comes from (``/proc/self/mountinfo``), which decides
whether a path is read in-process or by a :class:`StatfsProbe`.
"""

from __future__ import annotations

import contextlib
import errno
import math
import os
import re
import select
import subprocess
import sys
import time
from collections.abc import Sequence

from sysmetrics.host.source import DiskUsage

_CHUNK = 65536  # bytes per read of mountinfo


def _statvfs_usage(path: str) -> DiskUsage:
    """``statvfs`` of ``path`` in this thread (it may block as long as the filesystem does)."""
    st = os.statvfs(path)
    return _usage(st.f_blocks, st.f_bfree, st.f_bavail, st.f_frsize)


def _usage(blocks: int, bfree: int, bavail: int, frsize: int) -> DiskUsage:
    """Bytes used and total of a ``statvfs``, and percent of the space users can reach."""
    total = blocks * frsize
    used = (blocks - bfree) * frsize
    reachable = used + bavail * frsize
    return DiskUsage(used, total, (used / reachable * 100.0 if reachable else 0.0))


LOCAL_FILESYSTEMS = frozenset(
    {
        "ext2",
        "ext3",
        "ext4",
        "xfs",
        "btrfs",
        "bcachefs",
        "zfs",
        "f2fs",
        "jfs",
        "reiserfs",
        "nilfs2",
        "vfat",
        "msdos",
        "exfat",
        "ntfs",
        "ntfs3",
        "hfs",
        "hfsplus",
        "udf",
        "iso9660",
        "squashfs",
        "erofs",
        "tmpfs",
        "ramfs",
        "devtmpfs",
        "overlay",
        "proc",
        "sysfs",
        "cgroup",
        "cgroup2",
        "devpts",
        "mqueue",
        "hugetlbfs",
        "debugfs",
        "tracefs",
        "securityfs",
        "pstore",
        "efivarfs",
        "bpf",
        "configfs",
        "binfmt_misc",
        "rootfs",
    }
)
"""Filesystem types the local kernel answers ``statfs`` for: read in-process. Any other
type (``fuse*``, ``nfs*``, ``cifs``, ``lustre``, ``ceph``, ``9p``, ``autofs``, ...) may
block in the kernel for as long as its server does, so it is read by a helper process."""

PROBE_EVERY = 5.0  # s between two statfs of a path read by a helper process
PROBE_WAIT = 0.1  # s a sample waits for the helper's answer (a later answer counts later)
PROBE_TIMEOUT = 10.0  # s without an answer: the helper is killed, the path has failed
PROBE_CURRENT = 1.0  # s an answer stays current after the next one is due
_MOUNTINFO_BYTES = 16 * 1024 * 1024  # read at most this much of /proc/self/mountinfo
_ANSWER_BYTES = 4096  # an answer longer than this is garbled
_OCTAL = re.compile(r"\\([0-7]{3})")


def filesystem_type(path: str, mountinfo: str = "/proc/self/mountinfo") -> str | None:
    """The type of the filesystem ``path`` is on (``"ext4"``, ``"fuse.gcsfuse"``), or None.

    The mount in ``mountinfo`` with the longest mount point that holds ``path`` made
    real (the last one mounted of those on the same point). None where ``mountinfo``
    cannot be read (not Linux) or names no mount of it. Reads at most 16 MiB.
    """
    try:
        fd = os.open(mountinfo, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        chunks, size = [], 0
        while size < _MOUNTINFO_BYTES and (chunk := os.read(fd, _CHUNK)):
            chunks.append(chunk)
            size += len(chunk)
    except OSError:
        return None
    finally:
        os.close(fd)
    return _mount_type(os.fsdecode(b"".join(chunks)), os.path.realpath(path))


def _mount_type(mountinfo: str, path: str) -> str | None:
    """The type of the innermost mount of the absolute ``path`` in ``mountinfo``'s text."""
    found, longest = None, -1
    for line in mountinfo.splitlines():
        left, sep, right = line.partition(" - ")
        fields, kind = left.split(" "), right.split(" ", 1)[0]
        if not sep or len(fields) < 5 or not kind:
            continue
        point = _OCTAL.sub(lambda m: chr(int(m.group(1), 8)), fields[4])
        if not point.startswith("/"):
            continue
        inside = path == point or path.startswith(point.rstrip("/") + "/")
        if inside and len(point) >= longest:
            found, longest = kind, len(point)
    return found


_HELPER = """
import os, sys
path = sys.argv[1]
while sys.stdin.buffer.readline():
    try:
        st = os.statvfs(path)
        out = "%d %d %d %d\\n" % (st.f_blocks, st.f_bfree, st.f_bavail, st.f_frsize)
    except OSError as exc:
        out = "E %d\\n" % (exc.errno or 0)
    sys.stdout.write(out)
    sys.stdout.flush()
"""


class StatfsProbe:
    """``statvfs`` of one path done by a helper process that can be killed.

    A ``statfs`` that blocks in the kernel (a FUSE or network filesystem whose server
    does not answer) puts the calling thread in uninterruptible sleep: a process with
    such a thread cannot exit, SIGKILL included, until the server answers. The helper
    takes that risk instead: :meth:`usage` never blocks more than ``wait`` seconds.

    The helper is started at the first :meth:`usage`, asked at most every ``every``
    seconds (a line on its stdin; one line back: four numbers or an errno). A request not
    answered in ``timeout`` seconds kills it (SIGKILL; it goes when the kernel lets it)
    and raises; no new helper is started for the path while the killed one still lives,
    so a dead mount holds at most one process. An answer is current for ``every`` seconds
    and ``PROBE_CURRENT`` more (a slow mount's next answer comes in time), no longer.

    Args:
        path: the path whose filesystem to measure.
        command: the helper's command line (a fake one in tests); Python's own by default.
        every, wait, timeout: seconds; ``PROBE_EVERY``, ``PROBE_WAIT``, ``PROBE_TIMEOUT``
            by default.

    """

    def __init__(
        self,
        path: str,
        command: Sequence[str] | None = None,
        every: float | None = None,
        wait: float | None = None,
        timeout: float | None = None,
    ) -> None:
        self.path = path
        self.command = list(command or [sys.executable, "-I", "-S", "-c", _HELPER, path])
        self.every = PROBE_EVERY if every is None else every
        self.wait = PROBE_WAIT if wait is None else wait
        self.timeout = PROBE_TIMEOUT if timeout is None else timeout
        self._proc: subprocess.Popen[bytes] | None = None
        self._killed: subprocess.Popen[bytes] | None = None  # may still be in the kernel
        self._buffer = b""
        self._sent: float | None = None  # monotonic time of the request in flight
        self._asked = -math.inf  # monotonic time of the latest request
        self._value: DiskUsage | None = None
        self._measured = -math.inf

    @property
    def pid(self) -> int | None:
        """The helper's process id, None while there is none."""
        return self._proc.pid if self._proc is not None else None

    def usage(self) -> DiskUsage | None:
        """Usage as ``disk_usage`` gives it, or None while nothing is current.

        Raises:
            OSError: the path's own error (``ENOENT``, ``ESTALE``, ...), the helper ended,
                or ``TimeoutError``: no answer in ``timeout`` seconds (the helper is killed).

        """
        now = time.monotonic()
        if self._sent is not None:
            self._receive(now, 0.0)
        if self._sent is None and now - self._asked >= self.every and self._ask(now):
            self._receive(now, self.wait)
        if self._value is not None and now - self._measured <= self.every + PROBE_CURRENT:
            return self._value
        return None

    def _ask(self, now: float) -> bool:
        """Send a request (starting a helper if needed); False while a killed one lives."""
        if self._killed is not None:
            if self._killed.poll() is None:
                return False
            self._killed = None
        if self._proc is None:
            proc = subprocess.Popen(
                self.command,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,
                start_new_session=True,  # a terminal's Ctrl-C is not for it
            )
            assert proc.stdout is not None
            os.set_blocking(proc.stdout.fileno(), False)
            self._proc = proc
        assert self._proc.stdin is not None
        try:
            os.write(self._proc.stdin.fileno(), b"\n")
        except OSError:
            self._fail()
            raise OSError(errno.EPIPE, "the statfs helper process ended") from None
        self._sent = self._asked = now
        return True

    def _receive(self, now: float, wait: float) -> None:
        """Take the helper's answer if there is one, waiting at most ``wait`` s."""
        sent = self._sent
        assert self._proc is not None and self._proc.stdout is not None and sent is not None
        fd = self._proc.stdout.fileno()
        if wait > 0:
            select.select([fd], [], [], wait)
        try:
            data: bytes | None = os.read(fd, _ANSWER_BYTES)
        except BlockingIOError:
            data = None
        if data == b"":
            self._fail()
            raise OSError(errno.EPIPE, "the statfs helper process ended")
        self._buffer += data or b""
        answer, newline, rest = self._buffer.partition(b"\n")
        if newline:
            self._buffer, self._sent = rest, None
            self._value = None
            fields = answer.split()
            if len(fields) == 2 and fields[0] == b"E" and fields[1].isdigit():
                code = int(fields[1])
                raise OSError(code, os.strerror(code), self.path)
            if len(fields) != 4 or not all(f.isdigit() for f in fields):
                self._fail()
                raise OSError(errno.EPROTO, f"the statfs helper answered {answer[:60]!r}")
            blocks, bfree, bavail, frsize = (int(f) for f in fields)
            if not (bfree <= blocks and bavail <= blocks):
                raise OSError(
                    errno.EPROTO, f"statfs answered more free blocks than blocks: {answer[:60]!r}"
                )
            self._value, self._measured = _usage(blocks, bfree, bavail, frsize), now
        elif len(self._buffer) > _ANSWER_BYTES:
            self._fail()
            raise OSError(errno.EPROTO, "the statfs helper's answer is garbled")
        elif time.monotonic() - sent > self.timeout:
            self._fail()
            raise TimeoutError(
                errno.ETIMEDOUT,
                f"statfs did not answer in {self.timeout:g} s (a hung mount?); its helper "
                "process was killed",
            )

    def _fail(self) -> None:
        """Kill the helper; nothing is current until a new one answers."""
        self._value, self._sent, self._buffer = None, None, b""
        proc, self._proc = self._proc, None
        if proc is None:
            return
        with contextlib.suppress(OSError):
            proc.kill()
        for pipe in (proc.stdin, proc.stdout):
            with contextlib.suppress(OSError):
                if pipe is not None:
                    pipe.close()
        if proc.poll() is None:
            self._killed = proc  # in a statfs the kernel does not interrupt: wait for it

    def close(self) -> None:
        """Kill the helper; never waits for it."""
        self._fail()
