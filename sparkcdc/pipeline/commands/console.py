"""What the pipeline's commands print with: a rich console, and sizes for people. Shared by
the live display (``progress``), ``status``, ``validate`` and ``verify``, so none of them
imports another for it."""

from __future__ import annotations


def make_console():
    """A rich console; wide enough for the tables when the output is not a terminal."""
    from rich.console import Console

    c = Console()
    return c if c.is_terminal else Console(width=160)


def human_bytes(n: float) -> str:
    for unit in ("B", "KB", "MB", "GB"):
        if n < 1024 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return str(n)
