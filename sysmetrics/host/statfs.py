"""Disk usage of filesystems that may hang (network, FUSE): ``statfs`` in a helper process.

Also where a path's filesystem type comes from (``/proc/self/mountinfo``'s text alone,
:func:`filesystem_type`; no call on the path itself), which decides whether a path is
read in-process or by a :class:`StatfsProbe`, and :class:`MountWatch`, which tells when
that table changed.
"""

from __future__ import annotations

import contextlib
import errno
import math
import os
import re
import select
import socket
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence

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
MOUNTINFO = "/proc/self/mountinfo"  # the mount table the paths are placed by
MOUNTS_EVERY = 1.0  # s: a mount table that changed is read again at most this often
_MOUNTINFO_BYTES = 16 * 1024 * 1024  # read at most this much of the mount table
_MAX_LINKS = 40  # symbolic links followed in one path (the kernel's own limit)
_ANSWER_BYTES = 4096  # an answer longer than this is garbled
_NOSIGNAL: int = getattr(socket, "MSG_NOSIGNAL", 0)  # a send that never raises SIGPIPE
_NOSIGPIPE: int | None = getattr(socket, "SO_NOSIGPIPE", None)  # the same, where no flag
_OCTAL = re.compile(r"\\([0-7]{3})")


def is_local(kind: str | None) -> bool:
    """Whether a path on a filesystem of type ``kind`` is read in this process.

    True for the types in ``LOCAL_FILESYSTEMS`` and for None (no mount table: not Linux).
    """
    return kind is None or kind in LOCAL_FILESYSTEMS


def filesystem_type(path: str, mountinfo: str | None = None) -> str | None:
    """The type of the filesystem ``path`` is on (``"ext4"``, ``"fuse.gcsfuse"``), or None.

    Decided from the text of ``mountinfo`` (``MOUNTINFO`` by default) by
    :func:`_path_type`, which touches no filesystem but local ones: a path on a dead
    network mount is answered without waiting. None where ``mountinfo`` cannot be read
    (not Linux) or names no mount of it. Reads at most 16 MiB.
    """
    try:
        fd = os.open(mountinfo or MOUNTINFO, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        text = _read_table(fd)
    finally:
        os.close(fd)
    return None if text is None else _path_type(path, _mounts(text))


def local_path(path: str, mountinfo: str | None = None) -> bool:
    """Whether ``path`` may be touched by this process: it is on a local filesystem.

    The question any code must ask before ``stat``, ``exists`` or ``realpath`` of a
    ``disk_paths`` entry: a path on a non-local mount is left to its helper process.
    """
    return is_local(filesystem_type(path, mountinfo))


def _read_table(fd: int) -> str | None:
    """The mount table open at ``fd``, read from its start (at most 16 MiB); None on error.

    ``pread``: a forked child sharing the open file cannot move this reader's offset.
    """
    chunks, size = [], 0
    try:
        while size < _MOUNTINFO_BYTES and (chunk := os.pread(fd, _CHUNK, size)):
            chunks.append(chunk)
            size += len(chunk)
    except OSError:
        return None
    return os.fsdecode(b"".join(chunks))


def _mounts(mountinfo: str) -> dict[str, str]:
    r"""The type of each mount point of ``mountinfo``'s text.

    Octal escapes of the mount points (``\040``, a space) are decoded; of several mounts
    on the same point the last one, which hides the others, counts.
    """
    mounts = {}
    for line in mountinfo.splitlines():
        left, sep, right = line.partition(" - ")
        fields, kind = left.split(" ", 5), right.split(" ", 1)[0]
        if not sep or len(fields) < 5 or not kind or not fields[4].startswith("/"):
            continue
        point = fields[4]
        if "\\" in point:
            point = _OCTAL.sub(lambda m: chr(int(m.group(1), 8)), point)
        mounts[point.rstrip("/") or "/"] = kind
    return mounts


def _innermost(mounts: Mapping[str, str], path: str) -> str | None:
    """The type of the mount with the longest mount point holding the absolute ``path``.

    One lookup per component of ``path`` (from ``mounts`` of :func:`_mounts`); None where
    no mount holds it.
    """
    while True:
        kind = mounts.get(path)
        if kind is not None or path == "/":
            return kind
        path = path.rpartition("/")[0] or "/"


def _mount_type(mountinfo: str, path: str) -> str | None:
    """The type of the innermost mount of the absolute ``path`` in ``mountinfo``'s text."""
    return _innermost(_mounts(mountinfo), path)


def _path_type(path: str, mounts: Mapping[str, str]) -> str | None:
    """The type of the filesystem ``path`` is on, touching no filesystem but local ones.

    ``path`` is made absolute by the working directory's name, then walked one component
    at a time, each placed by ``mounts`` (:func:`_mounts`): on a local filesystem a
    component that is a symbolic link is followed (``readlink`` there never waits on a
    server; at most 40 links, then the rest is taken as written); the first component on
    a non-local mount ends the walk without being touched: its mount's type is the
    answer, whatever follows. ``..`` is the parent of what is walked so far.
    """
    if not path.startswith("/"):
        try:
            path = os.getcwd() + "/" + path
        except OSError:  # the working directory was removed
            return _innermost(mounts, "/")
    todo = path.split("/")[::-1]  # the components still to walk, the next one last
    done, links = "/", 0
    while todo:
        name = todo.pop()
        if name in ("", "."):
            continue
        if name == "..":
            done = os.path.dirname(done)
            continue
        here = done.rstrip("/") + "/" + name
        kind = _innermost(mounts, here)
        if not is_local(kind):
            return kind
        target = None
        if links < _MAX_LINKS:
            with contextlib.suppress(OSError):  # not a link (EINVAL), missing, ...
                target = os.readlink(here)
        if target is None:
            done = here
            continue
        links += 1
        if target.startswith("/"):
            done = "/"
        todo.extend(target.split("/")[::-1])
    return _innermost(mounts, done)


class MountWatch:
    """Tells when the mount table changed, cheaply enough to ask at every sample.

    ``/proc/self/mountinfo`` is held open: the kernel marks it ``POLLPRI`` after each
    mount and unmount in the process's namespace, which one ``poll`` with no wait sees
    (a plain file, as tests use, is watched by its size, time and inode instead).
    :meth:`changed` is true once the table changed since the last :meth:`read` and that
    read is ``MOUNTS_EVERY`` s old or more, so a busy table is read at most once a second.
    """

    def __init__(self, mountinfo: str | None = None) -> None:
        self.path = mountinfo or MOUNTINFO
        self._fd: int | None = None
        self._poll: select.poll | None = None
        self._stamp: tuple[int, int, int] | None = None
        self._pending = False
        self._read_at = -math.inf  # monotonic time of the latest read
        with contextlib.suppress(OSError):
            self._fd = os.open(self.path, os.O_RDONLY | os.O_CLOEXEC)
            self._stamp = self._stat()
            if hasattr(select, "poll"):
                self._poll = select.poll()
                self._poll.register(self._fd, select.POLLPRI | select.POLLERR)

    def _stat(self) -> tuple[int, int, int] | None:
        """Size, modification time (ns) and inode of the open table (constant for procfs)."""
        if self._fd is None:
            return None
        st = os.fstat(self._fd)
        return st.st_size, st.st_mtime_ns, st.st_ino

    def changed(self) -> bool:
        """Whether the table should be read again now (one ``poll`` and one ``fstat``)."""
        if self._fd is None:
            return False
        try:
            if self._poll is not None and any(
                ev & (select.POLLPRI | select.POLLERR) for _, ev in self._poll.poll(0)
            ):
                self._pending = True  # the kernel says so once per change: kept till read
            stamp = self._stat()
        except OSError:
            return False
        if stamp != self._stamp:
            self._stamp, self._pending = stamp, True
        return self._pending and time.monotonic() - self._read_at >= MOUNTS_EVERY

    def read(self) -> str | None:
        """The table's text (at most 16 MiB), None where it cannot be read."""
        if self._fd is None:
            return None
        self._pending, self._read_at = False, time.monotonic()
        return _read_table(self._fd)

    def close(self) -> None:
        """Close the table."""
        fd, self._fd, self._poll = self._fd, None, None
        if fd is not None:
            os.close(fd)


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
    seconds (a line on its stdin; one line back: four numbers or an errno). Its stdin
    and stdout are one end of a socket pair, written with ``MSG_NOSIGNAL``: a helper
    killed from outside is an ``EPIPE`` error here, never a ``SIGPIPE`` (which kills a
    process where it has its default action), and no signal disposition is changed. A request not
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
        self._sock: socket.socket | None = None  # our end of the helper's stdin and stdout
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
        if self._proc is None or self._sock is None:
            ours, theirs = socket.socketpair()
            try:
                if not _NOSIGNAL and _NOSIGPIPE is not None:  # macOS, BSD: per socket
                    ours.setsockopt(socket.SOL_SOCKET, _NOSIGPIPE, 1)
                self._proc = subprocess.Popen(
                    self.command,
                    stdin=theirs.fileno(),
                    stdout=theirs.fileno(),
                    stderr=subprocess.DEVNULL,
                    start_new_session=True,  # a terminal's Ctrl-C is not for it
                )
            except BaseException:
                ours.close()
                raise
            finally:
                theirs.close()  # the helper's alone: its end goes when it does
            ours.setblocking(False)
            self._sock = ours
        try:
            self._sock.send(b"\n", _NOSIGNAL)
        except OSError:
            self._fail()
            raise OSError(errno.EPIPE, "the statfs helper process ended") from None
        self._sent = self._asked = now
        return True

    def _receive(self, now: float, wait: float) -> None:
        """Take the helper's answer if there is one, waiting at most ``wait`` s."""
        sent, sock = self._sent, self._sock
        assert sock is not None and sent is not None
        if wait > 0:
            select.select([sock], [], [], wait)
        try:
            data: bytes | None = sock.recv(_ANSWER_BYTES)
        except BlockingIOError:
            data = None
        except OSError:  # ECONNRESET: the helper ended with a request unread
            data = b""
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
        sock, self._sock = self._sock, None
        if sock is not None:
            sock.close()
        if proc is None:
            return
        with contextlib.suppress(OSError):
            proc.kill()
        if proc.poll() is None:
            self._killed = proc  # in a statfs the kernel does not interrupt: wait for it

    def close(self) -> None:
        """Kill the helper; never waits for it."""
        self._fail()
