"""The one way specscope runs another program (llama-bench, a llama.cpp binary's --help): bounded.

`run_bounded` starts the command in a session of its own with no stdin, reads stdout and stderr
at the same time (one thread each, in chunks: a child that fills one pipe while we wait on the
other cannot deadlock us), keeps at most `max_stdout` bytes of stdout and the last lines of
stderr (stderr past `max_stderr` bytes in all also stops the child), and stops the whole process
group at `timeout_s`. Stderr lines are handed to `on_line` on the calling thread as they come
(progress). Every failure (cannot start, ran too long, wrote too much) is one `error` (a
SpecscopeError subclass the caller picks) that names the program and says what happened; a
non-zero exit status is returned, not raised, so the caller can read the program's last words.
"""

from __future__ import annotations

import os
import queue
import signal
import subprocess
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Sequence

from engine.errors import SpecscopeError

MiB = 1 << 20
CHUNK = 64 << 10
GRACE_S = 2.0              # after the child exits, how long its leftovers may hold the pipes
MAX_LINE = 64 << 10          # a stderr "line" longer than this is cut (progress lines are short)


@dataclass(frozen=True)
class Finished:
    returncode: int
    stdout: str              # decoded as UTF-8, undecodable bytes replaced
    tail: tuple[str, ...]    # stderr's last lines


def _kill(proc: subprocess.Popen) -> None:
    """Stop the child and anything it started (its session's process group)."""
    try:
        if hasattr(os, "killpg"):
            os.killpg(proc.pid, signal.SIGKILL)
        else:                                          # pragma: no cover (Windows)
            proc.kill()
    except (ProcessLookupError, PermissionError, OSError):
        try:
            proc.kill()
        except OSError:
            pass


class _Readers:
    """The two reader threads of one child: stdout kept (up to `max_stdout` bytes), stderr cut
    into lines; both hand what they see to one bounded queue the calling thread drains."""

    def __init__(self, proc: subprocess.Popen, max_stdout: int, max_stderr: int):
        self.proc, self.max_stdout, self.max_stderr = proc, max_stdout, max_stderr
        self.events: queue.Queue = queue.Queue(maxsize=1024)   # bounded: a flood of tiny lines waits for us
        self.stop = threading.Event()
        self.out = bytearray()
        self.too_much: list[str] = []
        self.threads = [threading.Thread(target=self._read_stdout, daemon=True),
                        threading.Thread(target=self._read_stderr, daemon=True)]
        for t in self.threads:
            t.start()

    def _put(self, item: tuple) -> None:
        while not self.stop.is_set():
            try:
                self.events.put(item, timeout=0.1)
                return
            except queue.Full:
                continue

    def _read_stdout(self) -> None:
        assert self.proc.stdout is not None
        try:
            while chunk := self.proc.stdout.read1(CHUNK):
                if len(self.out) + len(chunk) > self.max_stdout:
                    self.too_much.append(f"more than {self.max_stdout:,} bytes to stdout")
                    self._put(("over", None))
                    break
                self.out.extend(chunk)
        except (OSError, ValueError):
            pass
        self._put(("eof", "stdout"))

    def _read_stderr(self) -> None:
        assert self.proc.stderr is not None
        total, partial = 0, b""
        try:
            while chunk := self.proc.stderr.read1(CHUNK):
                total += len(chunk)
                if total > self.max_stderr:
                    self.too_much.append(f"more than {self.max_stderr:,} bytes to stderr")
                    self._put(("over", None))
                    break
                *lines, partial = (partial + chunk).split(b"\n")
                for line in lines:
                    self._put(("line", line[:MAX_LINE]))
                partial = partial[-MAX_LINE:]
        except (OSError, ValueError):
            pass
        if partial:
            self._put(("line", partial))
        self._put(("eof", "stderr"))

    def close(self) -> None:
        """Stop the readers, the child first if it still runs (an error, or KeyboardInterrupt:
        leave nothing running), and close the pipes whose reader has ended."""
        self.stop.set()
        if self.proc.poll() is None:
            _kill(self.proc)
            try:
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                pass
        for t, stream in zip(self.threads, (self.proc.stdout, self.proc.stderr)):
            t.join(timeout=1)
            if not t.is_alive():               # (closing under a blocked reader would block too)
                try:
                    stream.close()             # type: ignore[union-attr]
                except OSError:
                    pass


def _drain(readers: _Readers, *, deadline: float, timeout_s: float, name: str, error: type[SpecscopeError],
           tail_lines: int, on_line: Callable[[str], None] | None) -> list[str]:
    """Hand stderr's lines to `on_line` until both streams end; stderr's last lines. Stops the
    child and raises `error` past the deadline or the output bounds."""
    proc, open_streams, exited = readers.proc, 2, 0.0
    tail: list[str] = []
    while open_streams:
        left = deadline - time.monotonic()
        if left <= 0:
            _kill(proc)
            raise error(f"{name} ran past {timeout_s:g} s and was stopped")
        try:
            kind, value = readers.events.get(timeout=min(left, 0.5))
        except queue.Empty:
            if proc.poll() is not None:    # it exited; something it started holds the pipes
                exited = exited or time.monotonic()
                if time.monotonic() - exited > GRACE_S:
                    _kill(proc)
            continue
        if kind == "eof":
            open_streams -= 1
        elif kind == "over":
            _kill(proc)
            raise error(f"{name} wrote {readers.too_much[0]} and was stopped (is it the right program?)")
        else:
            text = value.decode("utf-8", errors="replace").rstrip("\r")
            tail = (tail + [text])[-tail_lines:]
            if on_line is not None:
                on_line(text)
    return tail


def run_bounded(cmd: Sequence[str], *, timeout_s: float, error: type[SpecscopeError] = SpecscopeError,
                max_stdout: int = 16 * MiB, max_stderr: int = 64 * MiB, tail_lines: int = 30,
                on_line: Callable[[str], None] | None = None, name: str | None = None) -> Finished:
    """Run `cmd` within `timeout_s` seconds and the output bounds (module docstring)."""
    name = name or Path(str(cmd[0])).name
    try:
        proc = subprocess.Popen([str(c) for c in cmd], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, start_new_session=True)
    except (OSError, ValueError) as e:
        raise error(f"cannot run {cmd[0]}: {getattr(e, 'strerror', None) or e}") from None
    readers = _Readers(proc, max_stdout, max_stderr)
    deadline = time.monotonic() + timeout_s
    try:
        tail = _drain(readers, deadline=deadline, timeout_s=timeout_s, name=name, error=error,
                      tail_lines=tail_lines, on_line=on_line)
        try:
            code = proc.wait(timeout=max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            _kill(proc)
            raise error(f"{name} ran past {timeout_s:g} s and was stopped") from None
    finally:
        readers.close()
    return Finished(code, bytes(readers.out).decode("utf-8", errors="replace"), tuple(tail))
