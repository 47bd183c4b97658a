"""Errors that leakshield reports to a user as one clear line (exit status 2 on the CLI)."""

from __future__ import annotations


class LeakshieldError(Exception):
    """A problem with the user's input: a bad name, value, file or config.

    The message is complete on its own: the CLI prints it as one line, without a traceback.
    """


class UnknownNameError(LeakshieldError, KeyError):
    """A registry lookup failed; the message lists the close matches and the allowed names."""

    def __str__(self) -> str:  # KeyError would quote the message
        return str(self.args[0]) if self.args else ""


class DataFileMissingError(LeakshieldError, FileNotFoundError):
    """A dataset loader did not find the files it reads; nothing is ever downloaded."""


class ConfigError(LeakshieldError, ValueError):
    """An experiment or component configuration is invalid."""


class RunDirectoryError(LeakshieldError):
    """A run directory cannot be used (holds a different config, or is not a run)."""
