"""The command line: ``sysmetrics record [options] -- COMMAND ...`` and ``sysmetrics report``.

``record`` runs COMMAND, watches its process tree with a :class:`SystemMonitor` and writes
the samples to a run file (:class:`~sysmetrics.sinks.jsonl.JsonlSink`), stamped with the
step the command marks with :func:`sysmetrics.step`. It forwards SIGINT and SIGTERM to the
command (not a SIGINT when the command is in the terminal's foreground process group: a
Ctrl-C reached it already) and exits with the command's exit status (128+N when it died of
signal N).
"""

from __future__ import annotations

import argparse
import contextlib
import errno
import importlib.metadata
import mmap
import os
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import warnings
from collections.abc import Iterator, Sequence
from types import FrameType
from typing import TYPE_CHECKING, Any

from sysmetrics import report
from sysmetrics.collectors.base import SystemMetricsWarning
from sysmetrics.live import LiveView
from sysmetrics.monitor import SystemMonitor
from sysmetrics.sinks.jsonl import JsonlSink
from sysmetrics.steps import ENV, WIDTH

if TYPE_CHECKING:
    from sysmetrics.sinks.prometheus import PrometheusExporter

PROG = "sysmetrics"
FORWARDED = (signal.SIGINT, signal.SIGTERM)
STEP_POLL = 0.1  # longest seconds between two reads of the step file
STEP_TRIES = 20  # reads of the step file at most, until two in a row agree


def _seconds(text: str) -> float:
    """An int where the text is one (so messages show the value as given), else a float.

    The range is the monitor's to check, with its message.
    """
    try:
        return int(text)
    except ValueError:
        pass
    try:
        return float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{text!r} is invalid: it must be a number of seconds"
        ) from None


def _port(text: str) -> int:
    """A TCP port, 0 to 65535 (0: the system picks a free one)."""
    try:
        port = int(text)
    except ValueError:
        port = -1
    if not 0 <= port <= 65535:
        raise argparse.ArgumentTypeError(f"{text} is invalid: use 0 to 65535 (0 picks a free port)")
    return port


def _version() -> str:
    """The installed distribution's version, or ``unknown``."""
    try:
        return importlib.metadata.version("sysmetrics")
    except importlib.metadata.PackageNotFoundError:
        return "unknown"


def _gpu_ids(text: str) -> list[int | str]:
    """``0,1`` or UUIDs, comma-separated: indices as ints, the rest as given."""
    return [int(i) if i.strip().isdigit() else i.strip() for i in text.split(",") if i.strip()]


def _endpoint(text: str) -> tuple[str, str]:
    name, sep, url = text.partition("=")
    if not sep or not name:
        raise argparse.ArgumentTypeError(f"{text!r} is invalid: use name=url")
    return name, url


def _parser() -> tuple[argparse.ArgumentParser, dict[str, argparse.ArgumentParser]]:
    parser = argparse.ArgumentParser(prog=PROG, description="System metrics of a command.")
    parser.add_argument("--version", action="version", version=f"{PROG} {_version()}")
    subs = parser.add_subparsers(dest="subcommand", required=True)
    rec = subs.add_parser(
        "record",
        help="run a command and record its metrics",
        description="Run COMMAND and write its metrics to a run file, one JSON line per "
        "sample. Exits with COMMAND's exit status (128+N when it died of signal N).",
    )
    # Defaults are written into the help strings: ArgumentDefaultsHelpFormatter would
    # add "(default: None)" to the options that have none.
    rec.add_argument(
        "--output",
        default="sysmetrics-run.jsonl",
        metavar="PATH",
        help="the run file, created or appended to (default: %(default)s)",
    )
    rec.add_argument(
        "--interval",
        type=_seconds,
        default=1.0,
        metavar="S",
        help="seconds between samples, 0.01 to 3600 (default: %(default)s)",
    )
    rec.add_argument(
        "--disk-path",
        action="append",
        dest="disk_paths",
        metavar="PATH",
        help="a path whose filesystem to report, made absolute (repeatable; default: /)",
    )
    rec.add_argument(
        "--gpu-ids",
        type=_gpu_ids,
        metavar="IDS",
        help="NVIDIA GPUs to watch: indices or UUIDs, comma-separated (default: all)",
    )
    rec.add_argument(
        "--open-metrics",
        type=_endpoint,
        action="append",
        metavar="NAME=URL",
        help="an OpenMetrics endpoint to scrape (repeatable)",
    )
    rec.add_argument(
        "--prometheus-port",
        type=_port,
        metavar="PORT",
        help="serve /metrics on 127.0.0.1 at this port; 0 picks a free one (default: off)",
    )
    rec.add_argument(
        "--live", action="store_true", help="print a compact line per interval to stderr"
    )
    rec.add_argument("command", nargs=argparse.REMAINDER, help="the command to run, after --")
    return parser, {"record": rec, "report": report.add_parser(subs)}


class _Proxy:
    """``latest()`` of the monitor once there is one: the exporter is made before it."""

    monitor: SystemMonitor | None = None

    def latest(self) -> dict[str, float]:
        return self.monitor.latest() if self.monitor is not None else {}


class _StepReader(threading.Thread):
    """Sets ``monitor.step`` from the step file every ``STEP_POLL`` s (or interval)."""

    def __init__(self, monitor: SystemMonitor, path: str) -> None:
        super().__init__(name="sysmetrics-steps", daemon=True)
        self.monitor = monitor
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        try:  # mapped, as the command maps it: two reads take ~0.1 us, two preads ~2 us
            self.map = mmap.mmap(fd, WIDTH, access=mmap.ACCESS_READ)
        finally:
            os.close(fd)
        self.done = threading.Event()

    def read(self) -> None:
        """Take the step in the file; what is not an integer is ignored.

        A read that raced a write (two reads that differ) is tried again, up to
        ``STEP_TRIES`` times: a loop that marks a step every microsecond still gets read.
        """
        with contextlib.suppress(ValueError):
            text = self.map[:]
            for _ in range(STEP_TRIES):
                again = self.map[:]
                if again == text:
                    self.monitor.step = int(text.decode())
                    return
                text = again

    def run(self) -> None:
        wait = min(self.monitor.interval, STEP_POLL)
        while not self.done.wait(wait):
            self.read()

    def close(self) -> None:
        """Stop, read the file a last time and close it."""
        self.done.set()
        if self.ident is not None:  # started
            self.join()
        self.read()
        self.map.close()


def _in_foreground(pid: int) -> bool:
    """Whether ``pid``'s process group is the foreground one of the controlling terminal.

    The terminal is found through fd 0, 1 or 2, else ``/dev/tty``. Any error (no terminal,
    the process gone, a platform without process groups) means False.
    """
    if sys.platform == "win32":
        return False
    try:
        group = os.getpgid(pid)
    except OSError:
        return False
    for fd in (0, 1, 2):
        with contextlib.suppress(OSError):  # not a terminal, or not the controlling one
            return os.tcgetpgrp(fd) == group
    try:
        fd = os.open("/dev/tty", os.O_RDONLY | os.O_NOCTTY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:  # no controlling terminal
        return False
    try:
        return os.tcgetpgrp(fd) == group
    except OSError:
        return False
    finally:
        os.close(fd)


def _status(returncode: int) -> int:
    return 128 - returncode if returncode < 0 else returncode


def record(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    """Run ``args.command`` under a monitor; return its exit status (see the module)."""
    command: list[str] = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("give the command to run, after --")
    options: dict[str, Any] = {}
    if args.disk_paths is not None:  # absolute: the path is part of the metric keys
        options["disk_paths"] = [os.path.abspath(p) if p else p for p in args.disk_paths]
    if args.gpu_ids is not None:
        options["gpu_ids"] = args.gpu_ids
    if args.open_metrics is not None:
        options["open_metrics"] = dict(args.open_metrics)
    proxy = _Proxy()
    try:  # every option is checked before the command starts, with the monitor's messages
        SystemMonitor(args.interval, **options).stop()
    except (TypeError, ValueError, ImportError, OSError) as exc:
        parser.error(str(exc))
    # The exporter before the run file: no file is left behind when it cannot start.
    exporter = _exporter(proxy, args.prometheus_port, parser)
    try:
        os.close(os.open(args.output, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644))
    except OSError as exc:
        if exporter is not None:
            exporter.close()
        parser.error(str(exc))
    if exporter is not None and args.prometheus_port == 0:  # a free port: say which
        url = f"http://127.0.0.1:{exporter.port}/metrics"
        print(f"{parser.prog}: serving {url}", file=sys.stderr)
    tmp = tempfile.mkdtemp(prefix="sysmetrics-")
    children: list[subprocess.Popen[bytes]] = []

    def forward(signum: int, frame: FrameType | None) -> None:
        # os.kill, not send_signal: that reaps an exited child, which _wait_exited leaves
        # unreaped (a zombie keeps its pid, so the signal cannot reach another process).
        for child in children:
            # Ctrl-C in a terminal signals its whole foreground process group: the command
            # has its SIGINT already, and a second one would interrupt its cleanup.
            if signum == signal.SIGINT and _in_foreground(child.pid):
                continue
            if child.returncode is None:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(child.pid, signum)

    previous = {s: signal.signal(s, forward) for s in FORWARDED}
    try:
        step_file = os.path.join(tmp, "step")
        with open(step_file, "wb") as f:
            f.write(b" " * WIDTH)
        try:
            children.append(subprocess.Popen(command, env={**os.environ, ENV: step_file}))
        except FileNotFoundError:
            print(f"{parser.prog}: {command[0]}: command not found", file=sys.stderr)
            return 127
        except OSError as exc:  # as a shell: not executable, no shebang (ENOEXEC), ...
            print(f"{parser.prog}: {command[0]}: {exc.strerror or exc}", file=sys.stderr)
            return 126
        child = children[0]
        try:
            _watch(child, command, args, options, step_file, proxy)
        finally:
            if child.poll() is None:  # the recorder failed: never leave the command behind
                child.kill()
            child.wait()
        return _status(child.returncode)
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
        if exporter is not None:
            exporter.close()
        shutil.rmtree(tmp, ignore_errors=True)


def _exporter(
    proxy: _Proxy, port: int | None, parser: argparse.ArgumentParser
) -> PrometheusExporter | None:
    """The ``--prometheus-port`` endpoint serving ``proxy``, or None without the option.

    Exits with status 2 (``parser.error``) when it cannot start: the extra is missing,
    or the port cannot be listened on.
    """
    if port is None:
        return None
    from sysmetrics.sinks.prometheus import PrometheusExporter

    try:
        return PrometheusExporter(proxy, port, "127.0.0.1")
    except ImportError as exc:
        parser.error(str(exc))
    except OSError as exc:  # the exporter's message speaks the Python API's terms
        why = os.strerror(exc.errno) if exc.errno else str(exc)
        hint = "use another port, or 0 for a free one" if exc.errno == errno.EADDRINUSE else ""
        parser.error(
            f"argument --prometheus-port: cannot listen on 127.0.0.1:{port}: {why}"
            + (f" ({hint})" if hint else "")
        )


def _watch(
    child: subprocess.Popen[bytes],
    command: list[str],
    args: argparse.Namespace,
    options: dict[str, Any],
    step_file: str,
    proxy: _Proxy,
) -> None:
    """Record ``child``'s tree (running ``command``) into the run file until it exits."""
    with contextlib.ExitStack() as stack:
        monitor = SystemMonitor(args.interval, pid=child.pid, **options)
        stack.callback(monitor.stop)  # where the sink cannot be made
        sink = JsonlSink(monitor, args.output, command=command)
        ending: dict[str, Any] = {}  # how the command ended, for the run file's end line
        stack.callback(lambda: sink.close(end=ending))
        stack.callback(monitor.stop)  # the last sample, with the last step, then the sink
        steps = _StepReader(monitor, step_file)
        stack.callback(steps.close)
        monitor.start()
        proxy.monitor = monitor
        steps.start()
        if args.live:
            live = LiveView(monitor)
            stack.callback(live.close)
            live.start()
        _wait_exited(child)
        ending.update(_ending(child))


def _ending(child: subprocess.Popen[bytes]) -> dict[str, Any]:
    """How ``child`` (exited) ended: ``{"exit_status": n}`` or ``{"signal": n, "signal_name"}``.

    Read without reaping it where the platform can (``waitid`` with ``WNOWAIT``).
    """
    code = child.returncode
    if code is None and hasattr(os, "waitid"):
        with contextlib.suppress(OSError):  # reaped already, or no WNOWAIT
            info = os.waitid(os.P_PID, child.pid, os.WEXITED | os.WNOWAIT | os.WNOHANG)
            if info is not None and info.si_code == os.CLD_EXITED:
                code = info.si_status
            elif info is not None and info.si_code in (os.CLD_KILLED, os.CLD_DUMPED):
                code = -info.si_status
    if code is None:
        return {}
    if code >= 0:
        return {"exit_status": code}
    try:
        name = signal.Signals(-code).name
    except ValueError:
        name = f"signal {-code}"
    return {"signal": -code, "signal_name": name}


def _wait_exited(child: subprocess.Popen[bytes]) -> None:
    """Wait for ``child`` to exit, leaving it unreaped where the platform can.

    Its process stays readable (a zombie) for the monitor's last sample; the caller reaps it.

    Where Linux has pidfds, wait in ``select()`` on the child's pidfd and on a wakeup fd
    instead: any of the recorder's threads may take a signal, but Python runs the handler
    in the main thread only, once back in Python, which a ``waitid()`` would delay until
    the command exits (a SIGINT that came while the recorder was stopped, for one).
    """
    with contextlib.suppress(AttributeError, OSError):  # no pidfd: wait in waitid()
        pidfd = os.pidfd_open(child.pid)
        try:
            _select_exited(pidfd)
            return
        finally:
            os.close(pidfd)
    if hasattr(os, "waitid"):
        with contextlib.suppress(ChildProcessError):  # reaped already
            os.waitid(os.P_PID, child.pid, os.WEXITED | os.WNOWAIT)
    else:
        child.wait()


def _select_exited(pidfd: int) -> None:
    """Wait until ``pidfd`` is readable (its process exited), running signal handlers."""
    wake, woken = os.pipe()
    try:
        os.set_blocking(wake, False)
        os.set_blocking(woken, False)
        previous = signal.set_wakeup_fd(woken, warn_on_full_buffer=False)
        try:
            while pidfd not in select.select([pidfd, wake], [], [])[0]:
                with contextlib.suppress(BlockingIOError):
                    os.read(wake, 512)  # a signal came: its handler runs on the way back
        finally:
            signal.set_wakeup_fd(previous)
    finally:
        os.close(wake)
        os.close(woken)


@contextlib.contextmanager
def _short_warnings() -> Iterator[None]:
    """Show each :class:`SystemMetricsWarning` as one ``sysmetrics: warning: ...`` line.

    Other warnings keep Python's format. The previous ``warnings.showwarning`` is put back
    on the way out.
    """
    previous = warnings.showwarning

    def show(
        message: Warning | str,
        category: type[Warning],
        filename: str,
        lineno: int,
        file: Any = None,
        line: str | None = None,
    ) -> None:
        if not issubclass(category, SystemMetricsWarning):
            previous(message, category, filename, lineno, file, line)
            return
        text = str(message)
        if text.startswith(f"{PROG}: "):  # the library's messages name it already
            text = text[len(PROG) + 2 :]
        with contextlib.suppress(OSError, AttributeError):  # stderr gone, as Python's
            print(f"{PROG}: warning: {text}", file=sys.stderr if file is None else file)

    warnings.showwarning = show
    try:
        yield
    finally:
        warnings.showwarning = previous


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line with ``argv`` (``sys.argv[1:]`` by default); return the status."""
    with _short_warnings():
        parser, subparsers = _parser()
        args = parser.parse_args(argv)
        if args.subcommand == "report":
            return report.report_command(args, subparsers["report"])
        return record(args, subparsers["record"])
