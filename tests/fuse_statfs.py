"""A real FUSE filesystem whose ``statfs`` hangs on demand, speaking the kernel protocol.

Run as ``python tests/fuse_statfs.py MOUNTPOINT HANG_FILE``: it opens ``/dev/fuse``, mounts
an empty directory of type ``fuse.sysmetrics-test`` on MOUNTPOINT with ``mount(2)`` (needs
root or CAP_SYS_ADMIN), prints ``ready`` once the kernel's INIT is answered, then serves
until SIGTERM, when it unmounts (lazily) and exits.

``statfs`` answers 1000 blocks of 4096 bytes, 400 free, 300 available to users (so a used
share of 600 / 900 = 66.7 %), except while HANG_FILE exists: then each STATFS request is
read from the kernel and left unanswered, which is what a gcsfuse, s3fs or sshfs server
that stopped answering does; the caller sleeps uninterruptibly (the kernel does not
interrupt a request the server has read). While HANG_FILE holds the word ``all``, every
request but INIT is held that way (a server that is dead, not only slow at statfs: a
``stat`` or path lookup on the mount then sleeps too; attributes are cached for 1 s).
Removing HANG_FILE answers the held requests.

No libfuse: the protocol (``linux/fuse.h``, 7.x) is small for an empty root directory.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import select
import signal
import stat
import struct
import sys

IN_HEADER = struct.Struct("<IIQQIIII")  # len, opcode, unique, nodeid, uid, gid, pid, pad
OUT_HEADER = struct.Struct("<IiQ")  # len, error, unique
INIT_OUT = struct.Struct("<IIIIHHIIHHI7I")
ATTR_OUT = struct.Struct("<QII" + "QQQQQQIIIIIIIIII")
STATFS_OUT = struct.Struct("<QQQQQIIII6I")

LOOKUP, FORGET, GETATTR, STATFS, INIT, INTERRUPT, DESTROY, BATCH_FORGET = (
    1, 2, 3, 17, 26, 36, 38, 42,
)  # fmt: skip
NO_REPLY = {FORGET, INTERRUPT, BATCH_FORGET}
BLOCKS, BFREE, BAVAIL, BSIZE = 1000, 400, 300, 4096
MS_NOSUID, MS_NODEV, MNT_DETACH = 2, 4, 2


def main() -> None:
    mountpoint, hang_file = sys.argv[1], sys.argv[2]
    libc = ctypes.CDLL(None, use_errno=True)
    fd = os.open("/dev/fuse", os.O_RDWR)
    options = f"fd={fd},rootmode=40000,user_id={os.getuid()},group_id={os.getgid()}"
    if libc.mount(
        b"sysmetrics-test",
        os.fsencode(mountpoint),
        b"fuse.sysmetrics-test",
        MS_NOSUID | MS_NODEV,
        options.encode(),
    ):
        err = ctypes.get_errno()
        sys.exit(f"mount failed: {os.strerror(err)}")
    stopping = []
    signal.signal(signal.SIGTERM, lambda *_: stopping.append(True))

    def reply(unique: int, body: bytes = b"", error: int = 0) -> None:
        with contextlib.suppress(OSError):  # the request was aborted meanwhile
            os.write(fd, OUT_HEADER.pack(OUT_HEADER.size + len(body), error, unique) + body)

    def hanging() -> str | None:
        """None while the server answers; ``"statfs"`` or ``"all"``: what it holds."""
        try:
            with open(hang_file) as f:
                return "all" if f.read().strip() == "all" else "statfs"
        except OSError:
            return None

    def answer(request: bytes) -> bool:
        """Answer one request; False where it was DESTROY (the end)."""
        _, opcode, unique, nodeid, *_ = IN_HEADER.unpack_from(request)
        if opcode in NO_REPLY:
            return True
        if opcode == INIT:
            _major, minor = struct.unpack_from("<II", request, IN_HEADER.size)
            body = INIT_OUT.pack(7, min(minor, 31), 0, 0, 16, 12, 65536, 1, 0, 0, 0,
                                 *[0] * 7)  # fmt: skip
            reply(unique, body)
            print("ready", flush=True)
        elif opcode == GETATTR and nodeid == 1:
            attr = (1, 0, 0, 0, 0, 0, 0, 0, 0, stat.S_IFDIR | 0o755, 2, os.getuid(),
                    os.getgid(), 0, BSIZE, 0)  # fmt: skip
            reply(unique, ATTR_OUT.pack(1, 0, 0, *attr))
        elif opcode == STATFS:
            statfs = STATFS_OUT.pack(BLOCKS, BFREE, BAVAIL, 100, 50, BSIZE, 255, BSIZE, 0,
                                     *[0] * 6)  # fmt: skip
            reply(unique, statfs)
        elif opcode == LOOKUP:
            reply(unique, error=-2)  # ENOENT: the directory is empty
        elif opcode == DESTROY:
            reply(unique)
            return False
        else:
            reply(unique, error=-38)  # ENOSYS
        return True

    held: list[bytes] = []
    try:
        while not stopping:
            if held and hanging() is None:
                for request in held:
                    answer(request)
                held.clear()
            if not select.select([fd], [], [], 0.05)[0]:
                continue
            try:
                request = os.read(fd, 1 << 20 | 4096)
            except OSError:
                continue  # ENOENT: a request interrupted before it was read
            opcode = IN_HEADER.unpack_from(request)[1]
            hang = hanging()
            if opcode not in NO_REPLY and (
                (opcode == STATFS and hang) or (hang == "all" and opcode != INIT)
            ):
                held.append(request)  # answered at the top of the loop once it answers
            elif not answer(request):
                break
    finally:
        libc.umount2(os.fsencode(mountpoint), MNT_DETACH)
        os.close(fd)


if __name__ == "__main__":
    main()
