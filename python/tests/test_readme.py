"""The README's Python section runs as written against a real daemon and prints what its comments say."""

from __future__ import annotations

import os
import re
import subprocess
import sys

from .support import REPOSITORY, Daemon


def python_blocks(section_title: str = "Python client") -> list[str]:
    """The ```python blocks of one section of the README ("Python client" by default), in order."""
    readme = (REPOSITORY / "README.md").read_text()
    start = readme.index(f"\n## {section_title}\n")
    end = readme.find("\n## ", start + 1)
    section = readme[start : end if end != -1 else None]
    return re.findall(r"```python\n(.*?)```", section, re.S)


def promised_lines(code: str) -> list[str]:
    """Every ``# → text`` comment, in order (several on one line are separate lines)."""
    lines: list[str] = []
    for line in code.splitlines():
        parts = line.split("# → ")[1:]
        lines.extend(part.strip() for part in parts)
    return lines


def test_the_section_has_the_examples() -> None:
    code = "\n".join(python_blocks())
    assert len(python_blocks()) == 6
    for call in (
        "sandboxd.connect(",
        ".exec(",
        ".exec_stream(",
        ".start_process(",
        ".reconnect()",
        ".send_input(",
        "stdin=",
        "AsyncSandbox(",
        ".wait_for_log(",
        ".wait_for_port(",
        ".wait_for_exit(",
        ".list_ports(",
    ):
        assert call in code


def test_the_section_runs_as_written(daemon: Daemon) -> None:
    code = "\n".join(python_blocks()).replace('"http://127.0.0.1:7007"', repr(daemon.url))
    env = {**os.environ, "SANDBOXD_TOKEN": daemon.token or ""}
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=60, check=False)
    assert result.returncode == 0, result.stderr
    assert result.stdout.rstrip("\n").split("\n") == promised_lines(code)


def test_the_files_section_runs_as_written(daemon: Daemon) -> None:
    code = "\n".join(python_blocks("Files"))
    assert "sandbox.files.write(" in code and "sandbox.files.iter(" in code
    code = code.replace('"http://127.0.0.1:7007"', repr(daemon.url))
    env = {**os.environ, "SANDBOXD_TOKEN": daemon.token or ""}
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=60, check=False)
    assert result.returncode == 0, result.stderr
    assert result.stdout.rstrip("\n").split("\n") == promised_lines(code)


def package_readme_blocks() -> list[str]:
    """Every ```python block of python/README.md, in order."""
    return re.findall(r"```python\n(.*?)```", (REPOSITORY / "python" / "README.md").read_text(), re.S)


def test_the_package_readme_runs_as_written(daemon: Daemon) -> None:
    blocks = package_readme_blocks()
    assert blocks and "sandboxd.connect()" in blocks[0]
    for code in blocks:
        # As a user runs them: the daemon and its token from the variables the SDK reads, the code untouched.
        env = {**os.environ, "SANDBOXD_URL": daemon.url, "SANDBOXD_TOKEN": daemon.token or ""}
        result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=60, check=False)
        assert result.returncode == 0, result.stderr
        assert result.stdout.rstrip("\n").split("\n") == promised_lines(code)
