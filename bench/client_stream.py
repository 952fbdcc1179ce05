"""A Python client as a process of its own, for bench/figures/client-memory.ts (the TypeScript bench/client-stream.ts
in Python): connects with the SDK in python/src, runs ``head -c BYTES /dev/zero`` through ``exec_stream`` or ``exec``
and prints one JSON line: bytes received, output events (one per message), RSS before the run (after a warm-up) and
the highest RSS during it, in bytes, and the milliseconds the run took.

    PYTHONPATH=python/src python bench/client_stream.py <url> exec_stream|exec <bytes>
"""

from __future__ import annotations

import json
import re
import sys
import threading
import time

import sandboxd


def rss_bytes() -> int:
    """VmRSS of this process, in bytes."""
    with open("/proc/self/status", encoding="utf-8") as status:
        match = re.search(r"^VmRSS:\s+(\d+) kB", status.read(), re.MULTILINE)
    return int(match.group(1)) * 1024 if match else 0


def run(sandbox: sandboxd.Sandbox, api: str, count: int) -> tuple[int, int]:
    """Runs the command through ``api``; returns the bytes received and the output events (one per message)."""
    command = f"head -c {count} /dev/zero"
    if api == "exec":
        result = sandbox.exec(command)
        # What a user reads of a result: its text.
        return len(result.stdout), 0
    received = events = 0
    for event in sandbox.exec_stream(command):
        if event.type == "stdout" and event.data:
            received += len(event.data)
            events += 1
    return received, events


def main() -> None:
    url, api, count = sys.argv[1], sys.argv[2], int(sys.argv[3])
    with sandboxd.connect(url, timeout=None) as sandbox:
        # Warm-up: the channel's windows open before the figure starts.
        run(sandbox, api, 4 * 1024 * 1024)
        time.sleep(0.3)
        base = rss_bytes()
        peak = [base]
        done = threading.Event()

        def sample() -> None:
            while not done.wait(0.02):
                peak[0] = max(peak[0], rss_bytes())

        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        began = time.perf_counter()
        received, events = run(sandbox, api, count)
        elapsed_ms = (time.perf_counter() - began) * 1000
        done.set()
        sampler.join()
        peak[0] = max(peak[0], rss_bytes())
    print(json.dumps({"bytes": received, "events": events, "baseRss": base, "peakRss": peak[0], "ms": elapsed_ms}), flush=True)


if __name__ == "__main__":
    main()
