"""A headless Debian chromium driven by selenium through Debian's chromedriver (no browser download:
the Makefile's `browser` target installs both with apt)."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from selenium import webdriver
from selenium.common.exceptions import NoSuchElementException, StaleElementReferenceException
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver
from selenium.webdriver.support.ui import WebDriverWait

T = TypeVar("T")

CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"
#: without these, chromium reaches for the network at start and hangs on a machine without one
FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-dev-shm-usage",
    "--window-size=1200,900",
)
#: the docs' screenshots (docs/dashboard.md): written there when ROCKETSPARK_SCREENSHOTS=docs, else
#: beside the test's other files (so a run leaves the committed images alone)
DOCS_IMAGES = Path(__file__).resolve().parents[2] / "docs" / "images"


def start_browser() -> tuple[WebDriver, str]:
    """The browser and its fresh profile directory (removed by `stop_browser`)."""
    for binary in (CHROMIUM, CHROMEDRIVER):
        if not Path(binary).exists():
            raise RuntimeError(f"{binary} is missing: run `make browser` (apt-get install chromium chromium-driver)")
    profile = tempfile.mkdtemp(prefix="rocketspark-chromium-")
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in FLAGS:
        options.add_argument(flag)
    options.add_argument(f"--user-data-dir={profile}")
    driver = webdriver.Chrome(options=options, service=Service(CHROMEDRIVER))
    driver.set_page_load_timeout(30)
    return driver, profile


def stop_browser(driver: WebDriver, profile: str) -> None:
    try:
        driver.quit()
    finally:
        shutil.rmtree(profile, ignore_errors=True)


def wait_for(driver: WebDriver, check: Callable[[WebDriver], T], timeout_s: float = 15.0, what: str = "") -> T:
    """`check` until it holds; an element the page's live refresh just replaced counts as "not yet"."""
    ignored = (NoSuchElementException, StaleElementReferenceException)
    return WebDriverWait(driver, timeout_s, poll_frequency=0.1, ignored_exceptions=ignored).until(check, message=what)


def text(driver: WebDriver, selector: str) -> str:
    """The text a person sees in the element (read again when a live refresh replaced it meanwhile)."""
    return wait_for(driver, lambda d: str(d.find_element(By.CSS_SELECTOR, selector).text) or " ", 5, selector).strip()


def screenshot(driver: WebDriver, name: str, scratch: Path) -> Path:
    """The page as PNG (docs/images/dashboard-NAME.png with ROCKETSPARK_SCREENSHOTS=docs)."""
    folder = DOCS_IMAGES if os.environ.get("ROCKETSPARK_SCREENSHOTS") == "docs" else scratch
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"dashboard-{name}.png"
    driver.save_screenshot(str(path))
    return path


def click_and_load(driver: WebDriver, selector: str, timeout_s: float = 15.0) -> None:
    """Click what submits a form or follows a link, and wait until the next page has loaded."""
    driver.execute_script("window.beforeClick = true")
    driver.find_element("css selector", selector).click()
    wait_for(
        driver,
        lambda d: d.execute_script("return window.beforeClick === undefined && document.readyState === 'complete'"),
        timeout_s,
        what=f"the page after clicking {selector}",
    )
