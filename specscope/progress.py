"""Progress on stderr: one line rewritten in place on a terminal, one line per step otherwise."""

from __future__ import annotations

import sys
from typing import TextIO

BAR = 24


class Progress:
    """Call with (message, fraction in [0, 1] or None). On a terminal the line is rewritten in
    place and ends when the fraction reaches 1 (or is None); into a file or pipe each new
    message is one line, so logs stay readable."""

    def __init__(self, stream: TextIO | None = None):
        self.stream = stream or sys.stderr
        self.tty = getattr(self.stream, "isatty", lambda: False)()
        self._last = ""

    def __call__(self, message: str, fraction: float | None = None) -> None:
        if not self.tty:
            if message != self._last:
                pct = "" if fraction is None else f" ({fraction * 100:.0f}%)"
                self.stream.write(f"{message}{pct}\n")
                self.stream.flush()
                self._last = message
            return
        bar = "" if fraction is None else f"[{'#' * int(fraction * BAR):<{BAR}}] {fraction * 100:3.0f}%  "
        line = f"\r{bar}{message[:90]:<90}"
        if line != self._last:
            self.stream.write(line)
            self._last = line
        if fraction is None or fraction >= 1.0:
            self.stream.write("\n")
            self._last = ""
        self.stream.flush()
