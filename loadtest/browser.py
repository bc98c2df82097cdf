"""Headless Chromium through selenium, for the /ui test and its screenshot.

    driver = headless_chromium()        # Debian's chromium and chromium-driver
    driver.get(url + "/ui"); driver.save_screenshot("ui.png"); driver.quit()

selenium is a dev dependency; the import is here, not at the top of the benchmarks.
"""

from __future__ import annotations

import shutil
from typing import Any


def headless_chromium(width: int = 1400, height: int = 1000) -> Any:
    from selenium import webdriver

    driver_path = shutil.which("chromedriver")
    if driver_path is None:
        raise RuntimeError("chromedriver not found: apt-get install chromium chromium-driver")
    options = webdriver.ChromeOptions()
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage",
                f"--window-size={width},{height}"):
        options.add_argument(arg)
    binary = shutil.which("chromium")
    if binary:
        options.binary_location = binary
    return webdriver.Chrome(service=webdriver.ChromeService(driver_path), options=options)
