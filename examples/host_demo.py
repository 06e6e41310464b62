"""Sample the host for a few seconds while doing real work, and print what was collected.

Run: ``python examples/host_demo.py``. The work: a child process that keeps a core busy,
300 MB allocated and touched, 64 MB written and fsynced, 20 MB sent over loopback.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import tempfile
import threading
import time

from sysmetrics import SystemMonitor

SHOWN = [
    ("cpu", "%"),
    ("proc.cpu.threads", ""),
    ("proc.memory.rssMB", "MiB"),
    ("proc.memory.rssMB.max", "MiB"),
    ("memory", "%"),
    ("disk.out", "MiB"),
    ("network.sent", "B"),
]


def send_over_loopback(nbytes: int) -> None:
    with socket.create_server(("127.0.0.1", 0)) as server:

        def drain() -> None:
            conn, _ = server.accept()
            with conn:
                while conn.recv(1 << 20):
                    pass

        reader = threading.Thread(target=drain)
        reader.start()
        with socket.create_connection(server.getsockname()) as client:
            client.sendall(b"\0" * nbytes)
        reader.join()


def main() -> None:
    steps = [
        ("a child process spins a core", lambda: None),
        ("allocate and touch 300 MB", lambda: blocks.append(b"\1" * (300 << 20))),
        ("write and fsync 64 MB", lambda: write_file(64 << 20)),
        ("send 20 MB over loopback", lambda: send_over_loopback(20_000_000)),
    ]
    blocks: list[bytes] = []
    child = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    heads = [f"{k} ({u})" if u else k for k, u in SHOWN]
    widths = [len(h) + 2 for h in heads]
    print(f"{'step':<32}" + "".join(f"{h:>{w}}" for h, w in zip(heads, widths)))
    try:
        with SystemMonitor(interval=0.25) as monitor:
            for label, work in steps:
                work()
                time.sleep(1.0)
                snap = monitor.snapshot()
                cells = [f"{snap[k]:>{w}.1f}" for (k, _), w in zip(SHOWN, widths)]
                print(f"{label:<32}" + "".join(cells))
    finally:
        child.kill()
        child.wait()
    print(f"\n{len(snap)} keys in the last snapshot:")
    for key in sorted(snap):
        print(f"  {key:<32} {snap[key]:.2f}")


def write_file(nbytes: int) -> None:
    with tempfile.NamedTemporaryFile(dir=os.getcwd()) as f:
        f.write(os.urandom(nbytes))
        f.flush()
        os.fsync(f.fileno())


if __name__ == "__main__":
    main()
