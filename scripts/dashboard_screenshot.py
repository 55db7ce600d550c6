"""Regenerate docs/dashboard-job.png: the demo killed mid-training, resumed, shown on the job page.

    .venv/bin/python scripts/dashboard_screenshot.py [-o docs/dashboard-job.png]

Runs `multiworker run examples/mnist/job.yaml --inject-failure worker-1@step:600` in a fresh home,
then `multiworker ui --port 0` and headless Chromium (Debian's chromium and chromium-driver).
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("-o", "--output", default=str(ROOT / "docs" / "dashboard-job.png"))
    args = parser.parse_args()
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    home = tempfile.mkdtemp(prefix="mw-shot-")
    env = {**os.environ, "MULTIWORKER_HOME": home}
    mw = [sys.executable, "-m", "multiworker"]
    subprocess.run([*mw, "run", "examples/mnist/job.yaml", "-q", "--inject-failure", "worker-1@step:600"],
                   cwd=ROOT, env=env, check=True)
    job_id = subprocess.run([*mw, "list", "--json"], env=env, check=True, capture_output=True,
                            text=True).stdout
    job_id = re.search(r'"id":\s*"([0-9a-f]+)"', job_id).group(1)
    ui = subprocess.Popen([*mw, "ui", "--port", "0"], env=env, stdout=subprocess.PIPE, text=True)
    try:
        base = re.search(r"(http://[^/\s]+)", ui.stdout.readline()).group(1)
        opts = webdriver.ChromeOptions()
        opts.binary_location = "/usr/bin/chromium"
        for flag in ("--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                     f"--user-data-dir={home}/chromium", "--window-size=1400,1500"):
            opts.add_argument(flag)
        driver = webdriver.Chrome(options=opts, service=Service("/usr/bin/chromedriver"))
        try:
            driver.get(f"{base}/jobs/{job_id}")
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline and not driver.find_elements("css selector", "canvas"):
                time.sleep(0.5)
            time.sleep(2)  # let the charts finish drawing: this is a picture, not a test
            driver.save_screenshot(args.output)
        finally:
            driver.quit()
    finally:
        ui.terminate()
        ui.wait()
    print(f"wrote {args.output} (job {job_id})")


if __name__ == "__main__":
    main()
