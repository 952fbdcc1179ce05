"""Helpers that look at the machine itself: processes in /proc, bounded polling."""

from __future__ import annotations

import os
import random
import time
from collections.abc import Callable


def wait_for(check: Callable[[], bool], what: str, timeout: float = 15.0) -> None:
    """Polls `check` every 20 ms until it is true; fails naming `what` after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(0.02)


def sleep_marker() -> str:
    """A unique argument for `sleep` that marks one test's processes in /proc."""
    return f"1000.{random.randint(1_000_000, 9_999_999)}"


def sleepers(marker: str) -> list[int]:
    """Pids of live processes whose command line is exactly `sleep <marker>`."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as cmdline:
                if cmdline.read() != f"sleep\0{marker}\0".encode():
                    continue
            with open(f"/proc/{entry}/stat") as stat:
                if stat.read().rsplit(")", 1)[1].split()[0] in ("Z", "X"):
                    continue
        except OSError:
            continue
        found.append(int(entry))
    return found
