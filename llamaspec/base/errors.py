"""The one error type llamaspec raises on purpose.

Only the CLI entry point turns it into ``Error: ...`` / ``Hint: ...`` on stderr and a
non-zero exit; library callers catch it like any exception.
"""

from __future__ import annotations


class LlamaspecError(Exception):
    """A failure the user can act on: what failed, and the next thing to try."""

    def __init__(self, message: str, hint: str | None = None, exit_code: int = 1) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint
        self.exit_code = exit_code

    def __str__(self) -> str:
        return self.message if not self.hint else f"{self.message} (hint: {self.hint})"
