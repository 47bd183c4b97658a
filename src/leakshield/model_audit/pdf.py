"""The audit report as PDF: the HTML page printed by headless Chromium (no Python dependency; Debian:
``apt install chromium``)."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from pathlib import Path

from leakshield.errors import LeakshieldError
from leakshield.experiment.store import atomic_write_bytes

#: seconds Chromium may take to print the page
TIMEOUT = 300


def find_chromium() -> str:
    """The headless browser that prints the PDF (one line when none is installed)."""
    for name in ("chromium", "chromium-browser", "google-chrome", "chrome"):
        found = shutil.which(name)
        if found:
            return found
    raise LeakshieldError(
        "the PDF is printed by headless Chromium, which is not installed (Debian: apt "
        "install chromium); rerun without --pdf for the HTML report"
    )


def html_to_pdf(page: str, path: Path) -> Path:
    """Print ``page`` to ``path`` with headless Chromium."""
    browser = find_chromium()
    with tempfile.TemporaryDirectory() as folder:
        source = Path(folder) / "audit.html"
        source.write_text(page, encoding="utf-8")
        target = Path(folder) / "audit.pdf"
        sandbox = ["--no-sandbox"] if hasattr(os, "geteuid") and os.geteuid() == 0 else []  # root has none
        command = [
            browser,
            "--headless",
            *sandbox,
            "--disable-gpu",
            "--no-pdf-header-footer",
            f"--print-to-pdf={target}",
            source.as_uri(),
        ]
        try:
            done = subprocess.run(command, capture_output=True, text=True, timeout=TIMEOUT, check=False)
        except subprocess.TimeoutExpired:
            raise LeakshieldError(
                f"Chromium printed no PDF within {TIMEOUT} s; the HTML report is written"
            ) from None
        if not target.is_file():
            tail = " ".join((done.stderr or "").split())[-200:]
            raise LeakshieldError(f"Chromium printed no PDF (exit {done.returncode}): {tail}")
        atomic_write_bytes(path, target.read_bytes())
    return path
