"""The dashboard in a real headless Chromium (Selenium) against a real ``multiworker ui`` and real
jobs (the fast fake trainer): live jobs list, live logs across a restart, curves equal to the store,
cancel from the page, a job deleted while its page is open, compare; a screenshot of each page."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from helpers import fake_spec, mw, no_processes_left, wait_for
from uihelpers import UiServer, assert_not_blank, chromium, page_errors

from multiworker.job import Store
from multiworker.monitor.lifecycle import delete_job

pytest.importorskip("starlette")

WAIT = 45.0


@pytest.fixture(scope="module")
def home(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("uihome")


@pytest.fixture(scope="module")
def server(home):
    srv = UiServer(home)
    yield srv
    assert srv.stop() == 0


@pytest.fixture(scope="module")
def browser(tmp_path_factory):
    driver = chromium(tmp_path_factory.mktemp("chromium-profile"))
    driver.set_page_load_timeout(30)
    yield driver
    driver.quit()


def start_job(home: Path, tmp_path: Path, *trainer_args: str, workers: int = 2, name: str = "fake") -> str:
    spec = fake_spec(tmp_path, f"{{worker: {{replicas: {workers}}}}}", name=name)
    proc = mw("run", str(spec), "--detach", "--", *trainer_args, home=home, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc.stdout.strip().splitlines()[-1]


def js_wait(driver, script: str, timeout: float = WAIT):
    """Wait until ``script`` (a JS expression) is truthy in the page; return its value."""
    return wait_for(lambda: driver.execute_script(f"return {script}"), timeout=timeout, interval=0.2)


def shoot(driver, path: Path) -> Path:
    driver.save_screenshot(str(path))
    assert_not_blank(path)
    return path


def test_jobs_page_shows_a_running_job_then_succeeded_without_reload(server, browser, home, tmp_path):
    job_id = start_job(home, tmp_path, "--epochs", "10", "--epoch-seconds", "0.5")
    browser.get(server.base + "/")
    row = f'document.querySelector(\'#jobs tr[data-id="{job_id}"]\')'
    js_wait(browser, f'{row} && {row}.dataset.state === "Running"')
    browser.execute_script("window.__sameDocument = 'yes'")  # gone if the page reloads
    js_wait(browser, f'{row}.innerText.includes("2/2")')  # replicas running/total, once both have started
    js_wait(browser, f'{row}.dataset.state === "Succeeded"')
    assert browser.execute_script("return window.__sameDocument") == "yes"
    text = browser.execute_script(f"return {row}.innerText")
    assert "Succeeded" in text and "loss 0.1" in text  # the headline metric: the last epoch's loss
    # the name filter hides it, the state filter keeps it
    browser.find_element("id", "f-name").send_keys("no-such-job")
    js_wait(browser, f"!{row}")
    shoot(browser, tmp_path / "jobs.png")
    assert page_errors(browser) == []


def test_job_page_follows_logs_across_a_restart_and_draws_the_stored_curves(server, browser, home, tmp_path):
    job_id = start_job(home, tmp_path, "--epochs", "8", "--epoch-seconds", "0.6",
                       "--fail-replica", "worker-1", "--fail-attempts", "1")
    browser.get(f"{server.base}/jobs/{job_id}")
    log = "document.getElementById('log').innerText"
    js_wait(browser, f"{log}.includes('hello from worker-0 attempt 0')")
    # live: the group restarts (worker-1 fails at epoch 2), and the same pane goes on with attempt 1
    js_wait(browser, f"{log}.includes('--- attempt 1: the group restarted ---')")
    js_wait(browser, f"{log}.includes('hello from worker-0 attempt 1')")
    seen = browser.execute_script(f"return {log}.split('\\n').length")
    js_wait(browser, f"{log}.split('\\n').length > {seen}")  # more lines arrive while it runs
    js_wait(browser, "document.getElementById('job-state').textContent === 'Succeeded'")
    js_wait(browser, "document.getElementById('log-state').textContent.startsWith('ended')")
    assert '"epoch": 8' in browser.execute_script(f"return {log}")
    # the curves drawn are the store's epoch metrics (latest value of each epoch, per replica)
    # every replica's epoch 8 is drawn: the series poll that saw one replica's may have come before
    # the other's was stored, and the next one (every 3 s until the job ends) draws it
    js_wait(browser, "window.mwCharts.loss && window.mwCharts.loss.data[0].length === 8"
                     " && window.mwCharts.loss.data.slice(1).every(c => c[7] != null)")
    drawn = browser.execute_script(
        "const u = window.mwCharts.loss; return {labels: u.series.slice(1).map(s => s.label), data: u.data}")
    store = Store(home)
    expected: dict[str, dict[int, float]] = {}
    for row in store.metrics(job_id, "epoch"):
        expected.setdefault(f"loss ({row['replica']})", {})[row["epoch"]] = row["data"]["loss"]
    assert drawn["labels"] == sorted(expected)
    assert drawn["data"][0] == sorted({e for by in expected.values() for e in by})
    for label, column in zip(drawn["labels"], drawn["data"][1:]):
        assert column == pytest.approx([expected[label][e] for e in drawn["data"][0]])
    cpu = browser.execute_script("return window.mwCharts.cpu.series.slice(1).map(s => s.label)")
    assert cpu == ["worker-0", "worker-1"]
    # the timeline shows both attempts, and searching the log filters it
    assert "attempt 1" in browser.find_element("id", "attempts").text
    browser.find_element("id", "log-search").send_keys('"epoch": 8')
    js_wait(browser, "document.getElementById('log').childElementCount === 1")
    browser.find_element("id", "log-search").clear()
    browser.execute_script("document.getElementById('log-search').dispatchEvent(new Event('input'))")
    browser.execute_script("window.scrollTo(0, 0)")
    shoot(browser, tmp_path / "job.png")
    assert page_errors(browser) == []


def test_cancel_from_the_page_stops_the_job_and_every_replica(server, browser, home, tmp_path):
    job_id = start_job(home, tmp_path, "--epochs", "200", "--epoch-seconds", "0.3")
    browser.get(f"{server.base}/jobs/{job_id}")
    js_wait(browser, "document.querySelectorAll('#replicas .state-Running').length === 2")
    browser.find_element("id", "cancel-btn").click()
    js_wait(browser, "document.getElementById('confirm').open")
    browser.find_element("id", "confirm-yes").click()
    js_wait(browser, "document.getElementById('job-state').textContent === 'Cancelled'", timeout=60)
    assert Store(home).get_job(job_id).state == "Cancelled"
    assert no_processes_left(job_id)
    assert browser.find_element("id", "cancel-btn").is_displayed() is False
    assert page_errors(browser) == []


def test_a_job_deleted_while_its_page_is_open_is_shown_as_deleted(server, browser, home, tmp_path):
    job_id = start_job(home, tmp_path, "--epochs", "2", "--epoch-seconds", "0.1", workers=1)
    wait_for(lambda: Store(home).get_job(job_id).state == "Succeeded", timeout=WAIT)
    browser.get(f"{server.base}/jobs/{job_id}")
    js_wait(browser, "document.getElementById('job-state').textContent === 'Succeeded'")
    store = Store(home)
    delete_job(store, job_id)  # from elsewhere: another terminal
    js_wait(browser, "!document.getElementById('gone').hidden", timeout=20)
    assert browser.find_element("id", "delete-btn").is_enabled() is False
    assert "Succeeded" in browser.find_element("id", "job-state").text  # the last known state stays
    assert page_errors(browser) == []


def test_compare_page_draws_two_jobs_on_one_chart(server, browser, home, tmp_path):
    first = start_job(home, tmp_path, "--epochs", "3", "--epoch-seconds", "0.05", workers=1, name="first")
    second = start_job(home, tmp_path, "--epochs", "5", "--epoch-seconds", "0.05", workers=1, name="second")
    store = Store(home)
    wait_for(lambda: all(store.get_job(j).state == "Succeeded" for j in (first, second)), timeout=WAIT)
    browser.get(f"{server.base}/compare?ids={first},{second}")
    js_wait(browser, "window.mwCharts.compare && window.mwCharts.compare.series.length === 3")
    labels = browser.execute_script("return window.mwCharts.compare.series.slice(1).map(s => s.label)")
    assert labels == [f"first ({first})", f"second ({second})"]
    assert browser.execute_script("return window.mwCharts.compare.data[0]") == [1, 2, 3, 4, 5]
    time.sleep(0.3)
    shoot(browser, tmp_path / "compare.png")
    assert page_errors(browser) == []
