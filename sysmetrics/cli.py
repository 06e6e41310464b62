"""The command line: ``sysmetrics record [options] -- COMMAND ...``, ``report``, ``compare``...

``report``, ``compare``, ``deploy`` and ``top`` are their modules' (``compare``:
:mod:`sysmetrics.report.comparing`).

``record`` runs COMMAND, watches its process tree with a :class:`SystemMonitor` and writes
the samples to a run file (:class:`~sysmetrics.sinks.jsonl.JsonlSink`), stamped with the
step the command marks with :func:`sysmetrics.step`. It forwards SIGINT and SIGTERM to the
command and exits with the command's exit status (128+N when it died of signal N). The
command gets each SIGINT once: without a terminal it runs in a process group of its own
(a signal to the recorder's group reaches it only forwarded); with one it shares the
recorder's group, and a SIGINT is not forwarded while it is in the terminal's foreground
(Ctrl-C reached it already). See :func:`sysmetrics._child._own_group`.

The recorder's own failure never ends the command: where recording fails (an exception
of the recorder's), it says so once, leaves the command running, and still exits with
its status. With its standard error closed (``2>&-``), ``record`` prints nothing (see
:func:`_closed_stderr`).
"""

from __future__ import annotations

import argparse
import contextlib
import difflib
import errno
import io
import os
import shutil
import signal
import subprocess
import sys
import warnings
from collections.abc import Iterator, Mapping, Sequence
from types import FrameType
from typing import TYPE_CHECKING, Any

from sysmetrics import deploy_files, ledger, report, runfile, stepfile, top
from sysmetrics._child import (
    _ending,
    _has_terminal,
    _in_foreground,
    _own_group,
    _status,
    _wait_exited,
)
from sysmetrics.errors import OptionError, SystemMetricsWarning
from sysmetrics.hang import HangWatch, Progress
from sysmetrics.live_findings import LiveFindings
from sysmetrics.live_line import LiveView
from sysmetrics.monitor import SystemMonitor
from sysmetrics.options import OPTIONS
from sysmetrics.options import check as check_options
from sysmetrics.report import comparing
from sysmetrics.sinks.jsonl import JsonlSink, make_folders
from sysmetrics.stepfile import _StepReader

if TYPE_CHECKING:
    from sysmetrics.sinks.prometheus import PrometheusExporter

PROG = "sysmetrics"
FORWARDED = (signal.SIGINT, signal.SIGTERM)


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
        "--prometheus-run",
        metavar="RUN",
        help="the run label of the served series, up to 64 letters, digits, _ . : - "
        "(default: the launcher's job id, else the start time and random hex)",
    )
    rec.add_argument(
        "--live", action="store_true", help="print a compact line per interval to stderr"
    )
    rec.add_argument(
        "--no-findings",
        dest="live_findings",
        action="store_false",
        help="do not say the findings while recording (default: each finding once, on "
        "stderr, as the option live_findings of the callbacks)",
    )
    rec.add_argument("command", nargs=argparse.REMAINDER, help="the command to run, after --")
    subparsers = {
        "record": rec,
        "report": report.add_parser(subs),
        "top": top.add_parser(subs),
        "deploy": _deploy_parser(subs),
        "compare": comparing.add_parser(subs),
    }
    return parser, subparsers


def _deploy_parser(subs: Any) -> argparse.ArgumentParser:
    """``sysmetrics deploy grafana|prometheus-rules [DIR]``: the shipped files, written out."""
    dep: argparse.ArgumentParser = subs.add_parser(
        "deploy",
        help="write the Grafana dashboard or the Prometheus alerting rules to a folder",
        description="Write the Grafana dashboard (grafana: sysmetrics-dashboard.json) or the "
        "Prometheus alerting rules and their promtool unit tests (prometheus-rules: "
        "sysmetrics-rules.yml, sysmetrics-rules.test.yml) that ship with sysmetrics into DIR, "
        "and print the paths written.",
    )
    dep.add_argument("target", choices=list(deploy_files.TARGETS), help="what to write")
    dep.add_argument(
        "directory",
        nargs="?",
        default=".",
        metavar="DIR",
        help="the folder to write into, created where missing (default: the current folder)",
    )
    dep.add_argument(
        "--force", action="store_true", help="replace files there that differ from the shipped ones"
    )
    return dep


def deploy(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    """Write the shipped files of ``args.target`` into ``args.directory``; print their paths."""
    try:
        written = deploy_files.write(args.target, args.directory, force=args.force)
    except ValueError as exc:
        parser.error(str(exc))
    except OSError as exc:
        where = exc.filename if exc.filename is not None else args.directory
        parser.error(f"argument DIR: cannot write {str(where)!r}: {exc.strerror or exc}")
    for path in written:
        print(path)
    return 0


class _Proxy:
    """``latest()`` of the monitor once there is one: the exporter is made before it."""

    monitor: SystemMonitor | None = None

    def latest(self) -> dict[str, float]:
        return self.monitor.latest() if self.monitor is not None else {}

    @property
    def step(self) -> int | None:
        """The monitor's training step (``sysmetrics.step()`` in the command)."""
        return self.monitor.step if self.monitor is not None else None

    @property
    def stall(self) -> object:
        """The monitor's stall under way (:mod:`sysmetrics.hang`), or None."""
        return self.monitor.stall if self.monitor is not None else None


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
        if o.scope != "monitor":  # record's own (hang_after), not the monitor's
            continue
        if value is not None and value is not False and o.cli is not None:
            options[o.name] = o.cli.convert(value)
    return options


# The monitor's options that record's flags set, and each one's flag.
FLAGGED = tuple(o for o in OPTIONS if o.flag is not None and o.cli is not None)
FLAGS = {o.name: o.flag for o in FLAGGED}


def _flag_error(exc: BaseException) -> str:
    """The error about an option, naming record's flag and the value as typed.

    An :class:`OptionError` of an option declared with a flag reads ``argument --flag:
    <value as typed> <the rest>``: ``interval=0 is invalid: ...`` becomes ``argument
    --interval: 0 is invalid: ...``, ``disk_paths contains '/x', which does not exist:
    ...`` becomes ``argument --disk-path: '/x' does not exist: ...``. Another error reads
    as it is.
    """
    if isinstance(exc, OptionError) and exc.option in FLAGS:
        return f"argument {FLAGS[exc.option]}: {_as_typed(exc)}{exc.rest}"
    return str(exc)


def _as_typed(exc: OptionError) -> str:
    """The value of ``exc`` as record's command line takes it (:attr:`OptionError.part`)."""
    if exc.part == "name":  # an endpoint's name: --open-metrics NAME=URL
        return f"name {exc.value!r}"
    if exc.part == "key":  # an endpoint's URL
        return f"{exc.key}={exc.value!r}"
    if exc.part == "value" and isinstance(exc.value, (list, tuple)):  # --gpu-ids 0,1
        return ",".join(str(v) for v in exc.value)
    return repr(exc.value)


def _unknown(extra: list[str], parser: argparse.ArgumentParser) -> str:
    """``unrecognized arguments: ...``, with the flag of ``parser`` meant for each flag.

    The flag meant is the closest by spelling (``--outptu``: ``--output``), else the
    longest flag that the typed one starts with (``--xaxis``, ``--x-axis``: ``--x``).
    """
    # Compared without their dashes, which every flag shares.
    flags = {f.lstrip("-"): f for action in parser._actions for f in action.option_strings}
    parts = []
    for arg in extra:
        typed = arg.partition("=")[0].lstrip("-")
        close = difflib.get_close_matches(typed, list(flags), n=1, cutoff=0.6)
        if not close and arg.startswith("--") and typed:
            longs = (f for f, flag in flags.items() if flag.startswith("--"))  # not -h, -o
            close = sorted((f for f in longs if typed.startswith(f)), key=len)[-1:]
        parts.append(f"{arg} (did you mean {flags[close[0]]}?)" if close else arg)
    return "unrecognized arguments: " + " ".join(parts)


def _check_gpu_ids(options: Mapping[str, Any]) -> None:
    """Check ``gpu_ids`` against NVML before the command starts; only NVML can tell.

    A GPU it lacks would otherwise be found when the monitor is built, after the command
    has started (the monitor watches its pid). NVML is opened and closed once more for
    this, and only when ``--gpu-ids`` is given: no vendor tool is run.

    Raises:
        OptionError: ``gpu_ids`` name a GPU that cannot be watched.

    """
    if options.get("gpu_ids") is None:
        return
    from sysmetrics.collectors.nvidia import NvidiaCollector
    from sysmetrics.host import default_source

    collector = NvidiaCollector.create(default_source(), os.getpid(), options["gpu_ids"])
    if collector is not None:
        collector.close()


@contextlib.contextmanager
def _closed_stderr() -> Iterator[None]:
    """Where standard error (fd 2) is closed, print nothing, and keep it closed for the command.

    Python makes ``sys.stderr`` None then, and ``print(file=None)`` writes to stdout: the
    live lines and warnings would go among the command's output; and the first file the
    recorder opens would take fd 2. So, while recording, ``/dev/null`` holds fd 2 (not
    inherited: the command finds it closed, as it was given) and ``sys.stderr`` writes
    there. Both are put back on the way out. With fd 2 open, nothing changes.
    """
    try:
        os.fstat(2)
    except OSError:  # EBADF: closed
        pass
    else:
        yield
        return
    null = os.open(os.devnull, os.O_WRONLY | os.O_CLOEXEC)
    if null != 2:  # fd 0 or 1 was free too
        os.dup2(null, 2, inheritable=False)
        os.close(null)
    saved = sys.stderr
    sys.stderr = io.TextIOWrapper(io.FileIO(2, "w", closefd=False), write_through=True)
    try:
        yield
    finally:
        quiet, sys.stderr = sys.stderr, saved
        with contextlib.suppress(OSError, ValueError):
            quiet.close()
        os.close(2)


def record(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    """Run ``args.command`` under a monitor; return its exit status (see the module)."""
    with _closed_stderr():
        return _record(args, parser)


def _record(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    command: list[str] = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("give the command to run, after --")
    options = _options(args)
    proxy = _Proxy()
    try:  # every option is checked before the command starts, with the monitor's messages
        check_options(options, options)  # builds no collector: the monitor is, once, below
        _check_gpu_ids(options)
        given = {} if args.hang_after is None else {"hang_after": args.hang_after}
        args.hang_after = check_options(["hang_after"], given)["hang_after"]
        prices = ledger.prices_of(args)  # the cost ledger's (the exporter's money, carbon)
    except (TypeError, ValueError, ImportError, OSError) as exc:
        parser.error(_flag_error(exc))
    # The exporter before the run file: no file is left behind when it cannot start.
    exporter = _exporter(proxy, args.prometheus_port, args.prometheus_run, parser, prices)
    try:
        made, folders = _run_file(args.output)
    except OSError as exc:
        if exporter is not None:
            exporter.close()
        parser.error(f"argument --output: cannot write {args.output!r}: {exc.strerror or exc}")
    if exporter is not None and args.prometheus_port == 0:  # a free port: say which
        url = f"http://127.0.0.1:{exporter.port}/metrics"
        print(f"{parser.prog}: serving {url}", file=sys.stderr)
    tmp = stepfile.private_directory()
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
        step_file = stepfile.create(tmp)  # tmp is private (mkdtemp: 0700), as step() checks
        try:
            env = {**os.environ, stepfile.ENV: step_file}
            setup = None if shared else _own_group()
            children.append(subprocess.Popen(command, env=env, preexec_fn=setup))
        except FileNotFoundError:
            _unmake(args.output, made, folders)
            print(f"{parser.prog}: {command[0]}: command not found", file=sys.stderr)
            return 127
        except OSError as exc:  # as a shell: not executable, no shebang (ENOEXEC), ...
            _unmake(args.output, made, folders)
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
                _unmake(args.output, made, folders)
                parser.error(_flag_error(exc))
            try:
                _watch(child, monitor, command, args, step_file, proxy)
            except Exception as exc:  # the recorder's own failure never ends the command
                warnings.warn(
                    f"sysmetrics: recording stopped ({exc!r}"[:300] + "); the command goes "
                    "on, and sysmetrics record exits with its exit status",
                    SystemMetricsWarning,
                    stacklevel=1,
                )
                child.wait()  # SIGINT and SIGTERM are still forwarded
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


def _run_file(path: str) -> tuple[os.stat_result | None, list[str]]:
    """Check that the run file ``path`` can be written, before the command starts.

    Its missing folders are made, as the frameworks' loggers make theirs. Returns the new
    file's status where this made it (empty: :func:`_unmake` removes it if the command
    cannot start), None where it existed (it is appended to); and the folders made.

    Raises:
        OSError: it cannot be opened for writing, nor created (nor its folders).

    """
    folders = make_folders(path)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o644)
    except FileExistsError:
        os.close(os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CLOEXEC))
        return None, folders
    except OSError:
        _unmake(path, None, folders)
        raise
    try:
        return os.fstat(fd), folders
    finally:
        os.close(fd)


def _unmake(path: str, made: os.stat_result | None, folders: Sequence[str] = ()) -> None:
    """Remove what :func:`_run_file` made: the file if it is still empty, then the folders.

    A folder is removed only where it is empty.
    """
    if made is not None:
        with contextlib.suppress(OSError):
            st = os.stat(path)
            if (st.st_dev, st.st_ino, st.st_size) == (made.st_dev, made.st_ino, 0):
                os.unlink(path)
    for folder in reversed(folders):
        with contextlib.suppress(OSError):  # not empty: something else wrote there
            os.rmdir(folder)


def _exporter(
    proxy: _Proxy,
    port: int | None,
    run: str | None,
    parser: argparse.ArgumentParser,
    prices: ledger.Prices | None = None,
) -> PrometheusExporter | None:
    """The ``--prometheus-port`` endpoint serving ``proxy``, or None without the option.

    Exits with status 2 (``parser.error``) when it cannot start: the extra is missing,
    the port cannot be listened on, or ``--prometheus-run`` is invalid (or given alone).
    """
    if port is None:
        if run is not None:
            parser.error("argument --prometheus-run: needs --prometheus-port")
        return None
    from sysmetrics.sinks.prometheus import RUN_ALLOWED, PrometheusExporter

    try:
        return PrometheusExporter(proxy, port, "127.0.0.1", run=run, prices=prices)
    except ImportError as exc:
        parser.error(str(exc))
    except ValueError:  # the only option a user can get wrong here
        parser.error(f"argument --prometheus-run: {run!r} is invalid: {RUN_ALLOWED}")
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
        if args.live_findings:  # closed after the last sample, before the sink
            told = LiveFindings(monitor, _say)
            stack.callback(told.close)
        stack.callback(monitor.stop)  # the last sample, with the last step, then the sink
        steps = _StepReader(monitor, step_file)
        stack.callback(steps.close)
        monitor.start()
        proxy.monitor = monitor
        steps.start()
        if args.live_findings:
            told.start()
        hangs = HangWatch(
            args.hang_after,
            lambda: monitor.step_timing() if monitor.step_timing is not None else None,
            Progress(),
            0,
            say=_say if args.live_findings else None,
            monitor=monitor,
            record=sink.stall,
            pid=child.pid,
            step=lambda: monitor.step,
        )
        stack.callback(hangs.close)  # before the sink closes: its record is written
        hangs.start()
        if args.live:
            live = LiveView(monitor, sys.stderr)
            stack.callback(live.close)
            live.start()
        _wait_exited(child)
        ending.update(_ending(child))


def _say(line: str) -> None:
    """A finding, told live: one line on standard error, as the command's own go."""
    with contextlib.suppress(OSError, ValueError):  # stderr gone or closed
        print(line, file=sys.stderr, flush=True)


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
        if args.subcommand == "deploy":
            return deploy(args, subparsers["deploy"])
        if args.subcommand == "compare":
            return comparing.compare_command(args, subparsers["compare"])
        if args.subcommand == "top":
            return top.top_command(args, subparsers["top"])
        return record(args, subparsers["record"])
