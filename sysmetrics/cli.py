"""The command line: ``sysmetrics record [options] -- COMMAND ...`` and ``sysmetrics report``.

``record`` runs COMMAND, watches its process tree with a :class:`SystemMonitor` and writes
the samples to a run file (:class:`~sysmetrics.sinks.jsonl.JsonlSink`), stamped with the
step the command marks with :func:`sysmetrics.step`. It forwards SIGINT and SIGTERM to the
command and exits with the command's exit status (128+N when it died of signal N). The
command gets each SIGINT once: without a terminal it runs in a process group of its own
(a signal to the recorder's group reaches it only forwarded); with one it shares the
recorder's group, and a SIGINT is not forwarded while it is in the terminal's foreground
(Ctrl-C reached it already). See :func:`_own_group`.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import difflib
import errno
import mmap
import os
import re
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import warnings
from collections.abc import Callable, Iterator, Mapping, Sequence
from types import FrameType
from typing import TYPE_CHECKING, Any

from sysmetrics import report, runfile, steps
from sysmetrics.errors import SystemMetricsWarning
from sysmetrics.live import LiveView
from sysmetrics.monitor import SystemMonitor
from sysmetrics.options import OPTIONS
from sysmetrics.options import check as check_options
from sysmetrics.sinks.jsonl import JsonlSink

if TYPE_CHECKING:
    from sysmetrics.sinks.prometheus import PrometheusExporter

PROG = "sysmetrics"
FORWARDED = (signal.SIGINT, signal.SIGTERM)
STEP_POLL = 0.1  # longest seconds between two reads of the step file
STEP_TRIES = 20  # reads of the step file at most, until two in a row agree


def _port(text: str) -> int:
    """A TCP port, 0 to 65535 (0: the system picks a free one)."""
    try:
        port = int(text)
    except ValueError:
        port = -1
    if not 0 <= port <= 65535:
        raise argparse.ArgumentTypeError(f"{text} is invalid: use 0 to 65535 (0 picks a free port)")
    return port


def _parser() -> tuple[argparse.ArgumentParser, dict[str, argparse.ArgumentParser]]:
    parser = argparse.ArgumentParser(prog=PROG, description="System metrics of a command.")
    parser.add_argument("--version", action="version", version=f"{PROG} {runfile.version()}")
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
        "-o",
        "--output",
        default="sysmetrics-run.jsonl",
        metavar="PATH",
        help="the run file, created or appended to (default: %(default)s)",
    )
    add_flags(rec)
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
            self.map = mmap.mmap(fd, steps.SIZE, access=mmap.ACCESS_READ)
        finally:
            os.close(fd)
        self.done = threading.Event()

    def read(self) -> None:
        """Take the step in the file; what is not an integer is ignored.

        A read that raced a write (two reads that differ) is tried again, up to
        ``STEP_TRIES`` times: a loop that marks a step every microsecond still gets read.
        """
        start = len(steps.MAGIC)  # the header, then the step
        with contextlib.suppress(ValueError):
            text = self.map[start:]
            for _ in range(STEP_TRIES):
                again = self.map[start:]
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


def _has_terminal() -> bool:
    """Whether this process has a controlling terminal (``/dev/tty`` opens)."""
    try:
        fd = os.open("/dev/tty", os.O_RDONLY | os.O_NOCTTY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:  # ENXIO: no controlling terminal
        return False
    os.close(fd)
    return True


# Why the command gets its own process group only without a terminal.
#
# A signal sent to a process group reaches every process in it, and the recorder cannot
# tell a SIGINT sent to its group from one sent to it alone (``kill(-pgid)`` and
# ``kill(pid)`` give the same ``siginfo``: ``SI_USER`` and the sender's pid). So either the
# command is in the recorder's group and the recorder must not forward a group's SIGINT (but
# then one sent to the recorder alone is lost), or it is in a group of its own and the
# recorder forwards every one (the group's copy never reaches it). The second gives exactly
# one copy for ``kill -INT -PGID`` and ``kill -INT RECORDER_PID`` alike, and is used
# without a terminal. With a terminal, the command must stay in the terminal's foreground
# group to read it and for Ctrl-C and Ctrl-Z to work (a group of its own would need the
# recorder to do a shell's job control), so it shares the recorder's group there, and a
# SIGINT is not forwarded while the command is in the foreground: Ctrl-C reached it.

PR_SET_PDEATHSIG = 1  # prctl(2): the signal this process gets when its parent ends


def _own_group() -> Callable[[], None]:
    """What the command runs before ``exec`` without a terminal (see the comment above).

    It makes a process group of its own, so that a signal sent to the recorder's group
    reaches it only as the recorder forwards it: exactly once. On Linux it also asks for
    SIGKILL when the recorder ends, so that a SIGKILL sent to the recorder's group (a
    batch system's last resort) still ends the command, as it did in the same group.
    """
    parent = os.getpid()
    prctl: Any = None
    if sys.platform.startswith("linux"):  # resolved here: the child only calls it
        with contextlib.suppress(OSError, AttributeError):
            prctl = ctypes.CDLL(None, use_errno=True).prctl

    def setup() -> None:
        os.setpgid(0, 0)
        if prctl is not None:
            prctl(PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)
            if os.getppid() != parent:  # the recorder ended before the request
                os.kill(os.getpid(), signal.SIGKILL)

    return setup


def add_flags(parser: argparse.ArgumentParser) -> None:
    """Add a flag for each option declared with one (:data:`sysmetrics.options.OPTIONS`)."""
    for o in FLAGGED:
        assert o.flag is not None and o.cli is not None
        if o.cli.metavar is None:  # a switch
            parser.add_argument(o.flag, dest=o.name, action="store_true", help=o.cli.help)
            continue
        parser.add_argument(
            o.flag,
            dest=o.name,
            type=o.cli.parse or str,
            action="append" if o.cli.repeatable else "store",
            default=o.default if o.name == "interval" else None,
            metavar=o.cli.metavar,
            help=o.cli.help,
        )


def _options(args: argparse.Namespace) -> dict[str, Any]:
    """The monitor's options record's flags set (a flag not given leaves its default)."""
    options: dict[str, Any] = {}
    for o in FLAGGED:
        value = getattr(args, o.name)
        if value is not None and value is not False and o.cli is not None:
            options[o.name] = o.cli.convert(value)
    return options


# The monitor's options that record's flags set, by flag: its messages name the option.
FLAGGED = tuple(o for o in OPTIONS if o.flag is not None and o.cli is not None)
FLAGS = {o.name: o.flag for o in FLAGGED}


def _in_flags(message: str) -> str:
    """The monitor's ``message`` about one of its options, naming record's flag instead.

    ``interval=0 is invalid: ...`` becomes ``argument --interval: 0 is invalid: ...``,
    ``disk_paths contains '/x', which does not exist: ...`` becomes ``argument
    --disk-path: '/x' does not exist: ...``; another message is left as it is.
    """
    for option, flag in FLAGS.items():
        found = re.match(rf"{option}(=| contains | name |\[(.*?)\]=)(.*)", message, re.S)
        if found is None:
            continue
        how, key, rest = found.groups()
        if how == " contains ":
            rest = rest.replace(", which ", " ", 1)
        elif how == " name ":
            rest = f"name {rest}"
        elif key is not None:  # open_metrics['name']='url' ...
            rest = f"{key.strip(chr(39))}={rest}"
        elif listed := re.match(r"\[([^\]]*)\](.*)", rest, re.S):  # gpu_ids=[0, 1] ...
            rest = listed.group(1).replace(", ", ",") + listed.group(2)  # as typed: 0,1
        return f"argument {flag}: {rest}"
    return message


def _unknown(extra: list[str], parser: argparse.ArgumentParser) -> str:
    """``unrecognized arguments: ...``, with the closest flag of ``parser`` for each."""
    # Compared without their dashes, which every flag shares.
    flags = {f.lstrip("-"): f for action in parser._actions for f in action.option_strings}
    parts = []
    for arg in extra:
        typed = arg.partition("=")[0].lstrip("-")
        close = difflib.get_close_matches(typed, list(flags), n=1, cutoff=0.6)
        parts.append(f"{arg} (did you mean {flags[close[0]]}?)" if close else arg)
    return "unrecognized arguments: " + " ".join(parts)


def _status(returncode: int) -> int:
    return 128 - returncode if returncode < 0 else returncode


def _check_gpu_ids(options: Mapping[str, Any]) -> None:
    """Check ``gpu_ids`` against NVML before the command starts; only NVML can tell.

    A GPU it lacks would otherwise be found when the monitor is built, after the command
    has started (the monitor watches its pid). NVML is opened and closed once more for
    this, and only when ``--gpu-ids`` is given: no vendor tool is run.

    Raises:
        ValueError: ``gpu_ids`` name a GPU that cannot be watched.

    """
    if options.get("gpu_ids") is None:
        return
    from sysmetrics.collectors.nvidia import NvidiaCollector
    from sysmetrics.host import default_source

    collector = NvidiaCollector.create(default_source(), os.getpid(), options["gpu_ids"])
    if collector is not None:
        collector.close()


def record(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    """Run ``args.command`` under a monitor; return its exit status (see the module)."""
    command: list[str] = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("give the command to run, after --")
    options = _options(args)
    proxy = _Proxy()
    try:  # every option is checked before the command starts, with the monitor's messages
        check_options(options, options)  # builds no collector: the monitor is, once, below
        _check_gpu_ids(options)
    except (TypeError, ValueError, ImportError, OSError) as exc:
        parser.error(_in_flags(str(exc)))
    # The exporter before the run file: no file is left behind when it cannot start.
    exporter = _exporter(proxy, args.prometheus_port, parser)
    try:
        made = _run_file(args.output)
    except OSError as exc:
        if exporter is not None:
            exporter.close()
        parser.error(f"argument --output: cannot write {args.output!r}: {exc.strerror or exc}")
    if exporter is not None and args.prometheus_port == 0:  # a free port: say which
        url = f"http://127.0.0.1:{exporter.port}/metrics"
        print(f"{parser.prog}: serving {url}", file=sys.stderr)
    tmp = tempfile.mkdtemp(prefix="sysmetrics-")
    children: list[subprocess.Popen[bytes]] = []

    # With a terminal, the command shares our process group, as a shell's pipeline does:
    # it reads the terminal, and Ctrl-C or Ctrl-Z reach it as they reach us. Without one,
    # it gets a group of its own, so that a signal sent to our group (a batch system or CI
    # cancelling the job) reaches it once, forwarded by us (see _own_group).
    shared = sys.platform == "win32" or _has_terminal()

    def forward(signum: int, frame: FrameType | None) -> None:
        # os.kill, not send_signal: that reaps an exited child, which _wait_exited leaves
        # unreaped (a zombie keeps its pid, so the signal cannot reach another process).
        for child in children:
            # Ctrl-C in a terminal signals its whole foreground process group: the command
            # has its SIGINT already, and a second one would interrupt its cleanup.
            if signum == signal.SIGINT and shared and _in_foreground(child.pid):
                continue
            if child.returncode is None:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(child.pid, signum)

    previous = {s: signal.signal(s, forward) for s in FORWARDED}
    try:
        step_file = steps.create(tmp)  # tmp is private (mkdtemp: 0700), as step() checks
        try:
            env = {**os.environ, steps.ENV: step_file}
            setup = None if shared else _own_group()
            children.append(subprocess.Popen(command, env=env, preexec_fn=setup))
        except FileNotFoundError:
            _unmake(args.output, made)
            print(f"{parser.prog}: {command[0]}: command not found", file=sys.stderr)
            return 127
        except OSError as exc:  # as a shell: not executable, no shebang (ENOEXEC), ...
            _unmake(args.output, made)
            print(f"{parser.prog}: {command[0]}: {exc.strerror or exc}", file=sys.stderr)
            return 126
        if made is None:
            print(
                f"{parser.prog}: appending to the existing run file {args.output}", file=sys.stderr
            )
        child = children[0]
        try:
            try:  # once; a GPU gone since _check_gpu_ids is the one error left here
                monitor = SystemMonitor(pid=child.pid, **options)
            except (TypeError, ValueError, ImportError, OSError) as exc:
                child.kill()
                child.wait()
                _unmake(args.output, made)
                parser.error(_in_flags(str(exc)))
            _watch(child, monitor, command, args, step_file, proxy)
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


def _run_file(path: str) -> os.stat_result | None:
    """Check that the run file ``path`` can be written, before the command starts.

    Returns the new file's status where this made it (empty: :func:`_unmake` removes it
    if the command cannot start), None where it existed (it is appended to).

    Raises:
        OSError: it cannot be opened for writing, nor created.

    """
    try:
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o644)
    except FileExistsError:
        os.close(os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CLOEXEC))
        return None
    try:
        return os.fstat(fd)
    finally:
        os.close(fd)


def _unmake(path: str, made: os.stat_result | None) -> None:
    """Remove the run file :func:`_run_file` made, if it is still that empty file."""
    if made is None:
        return
    with contextlib.suppress(OSError):
        st = os.stat(path)
        if (st.st_dev, st.st_ino, st.st_size) == (made.st_dev, made.st_ino, 0):
            os.unlink(path)


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
    monitor: SystemMonitor,
    command: list[str],
    args: argparse.Namespace,
    step_file: str,
    proxy: _Proxy,
) -> None:
    """Record ``child``'s tree (running ``command``) with ``monitor`` until it exits."""
    with contextlib.ExitStack() as stack:
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
        args, extra = parser.parse_known_args(argv)
        if extra:  # the subcommand's usage, not the top level's
            sub = subparsers[args.subcommand]
            sub.error(_unknown(extra, sub))
        if args.subcommand == "report":
            return report.report_command(args, subparsers["report"])
        return record(args, subparsers["record"])
