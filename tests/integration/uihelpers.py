"""Helpers for dashboard tests: a real ``multiworker ui`` server process, headless Chromium, screenshots."""

from __future__ import annotations

import os
import queue
import re
import shutil
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest

CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"


class UiServer:
    """``multiworker ui --port 0 ARGS`` with MULTIWORKER_HOME=home; ``url`` once it printed it."""

    def __init__(self, home: Path, *args: str, timeout: float = 30.0):
        env = {**os.environ, "MULTIWORKER_HOME": str(home)}
        self.proc = subprocess.Popen([sys.executable, "-m", "multiworker", "ui", "--port", "0", *args],
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
        lines: queue.Queue[str] = queue.Queue()
        threading.Thread(target=lambda: [lines.put(line) for line in self.proc.stdout], daemon=True).start()
        try:
            first = lines.get(timeout=timeout)
        except queue.Empty:
            self.stop()
            raise AssertionError(f"multiworker ui printed no URL in {timeout}s: {self.proc.stderr.read()}") from None
        match = re.search(r"(http://\S+)", first)
        assert match, first
        self.printed = first
        self.url = match.group(1)
        self.base = re.sub(r"/\?.*$", "", self.url).rstrip("/")

    def stop(self, sig: int = signal.SIGINT, timeout: float = 15.0) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
                raise AssertionError("multiworker ui did not stop") from None
        return self.proc.returncode


def chromium(tmp_dir: Path):
    """A headless Chromium driven by Selenium, or a skip saying what is missing."""
    webdriver = pytest.importorskip("selenium.webdriver")
    from selenium.webdriver.chrome.service import Service

    for tool in (CHROMIUM, CHROMEDRIVER):
        if not shutil.which(tool):
            pytest.skip(f"{tool} is not installed (`make sysdeps` installs chromium and chromium-driver)")
    opts = webdriver.ChromeOptions()
    opts.binary_location = CHROMIUM
    for flag in ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync",
                 "--disable-dev-shm-usage", f"--user-data-dir={tmp_dir}", "--window-size=1400,1900"):
        opts.add_argument(flag)
    opts.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    return webdriver.Chrome(options=opts, service=Service(CHROMEDRIVER))


def assert_not_blank(png: Path) -> None:
    """The screenshot has content: many colours and real contrast, not one flat colour."""
    from PIL import Image, ImageStat

    with Image.open(png) as img:
        rgb = img.convert("RGB")
        assert rgb.size[0] > 600 and rgb.size[1] > 400, rgb.size
        stddev = ImageStat.Stat(rgb.convert("L")).stddev[0]
        colours = len(rgb.getcolors(maxcolors=1 << 20) or [])
    assert stddev > 15 and colours > 50, (png, stddev, colours)


def page_errors(driver) -> list[str]:
    """Severe browser console entries other than the HTTP 404s the pages expect (a deleted job)."""
    return [e["message"] for e in driver.get_log("browser")
            if e["level"] == "SEVERE" and "status of 404" not in e["message"]]
