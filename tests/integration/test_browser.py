"""The photo page at / in headless Chromium: pick a photo, press the button, read the result."""

import os
import shutil

import pytest
from helpers import PHOTOS_DIR

from pipeline_src.provenance.standins import BLIP_STANDIN_WARNING

CHROMIUM, CHROMEDRIVER = shutil.which("chromium"), shutil.which("chromedriver")
if not (CHROMIUM and CHROMEDRIVER) and not os.environ.get("CI"):
    pytest.skip(
        "needs Debian's chromium and chromium-driver (make test installs them as root)", allow_module_level=True
    )


@pytest.fixture(scope="module")
def browser(tmp_path_factory):
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in (
        "--headless=new",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        f"--user-data-dir={tmp_path_factory.mktemp('chromium-profile')}",
        "--window-size=1000,900",
    ):
        options.add_argument(flag)
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    yield driver
    driver.quit()


def caption_on_page(browser, url, photo):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    browser.get(f"{url}/")
    browser.find_element(By.ID, "photo").send_keys(str(photo))
    browser.find_element(By.ID, "submit").click()
    WebDriverWait(browser, 120).until(
        lambda driver: driver.find_elements(By.ID, "result-label") or driver.find_elements(By.ID, "result-error")
    )
    return {
        element.get_attribute("id"): element.text
        for element in browser.find_elements(By.CSS_SELECTOR, "#result [id^=result-]")
    }


def test_a_person_captions_a_photo_from_the_page(browser, api, tmp_path):
    shown = caption_on_page(browser, api.url, PHOTOS_DIR / "apple.jpg")
    browser.save_screenshot(str(tmp_path / "page.png"))
    assert shown["result-label"] == "Vegetable/Fruit"
    assert shown["result-caption"].startswith("a photo of vegetable/fruit,")
    assert shown["result-caption-status"] == "ok"
    assert shown["result-probability"].endswith("%")


def test_the_page_says_which_models_answered_and_warns_of_a_stand_in(browser, api, real_api):
    stand_in = caption_on_page(browser, api.url, PHOTOS_DIR / "apple.jpg")
    assert BLIP_STANDIN_WARNING in stand_in["result-warnings"]
    assert "captioner v1 (stand-in, sha256 " in stand_in["result-models"]
    real = caption_on_page(browser, real_api.url, PHOTOS_DIR / "apple.jpg")
    assert real["result-warnings"] == ""
    assert "captioner v1 (real, sha256 " in real["result-models"]


def test_the_page_shows_the_error_for_a_bad_photo(browser, api, tmp_path):
    bad = tmp_path / "not-a-photo.jpg"
    bad.write_bytes(b"nothing to see")
    shown = caption_on_page(browser, api.url, bad)
    assert shown["result-error"].startswith("Error 400:")
    assert "cannot decode" in shown["result-error"]


def test_a_person_captions_a_photo_from_swagger(browser, api):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    wait = WebDriverWait(browser, 120)
    browser.get(f"{api.url}/docs")
    operation = "#operations-caption-caption_caption_post"
    wait.until(lambda driver: driver.find_elements(By.CSS_SELECTOR, operation))
    browser.find_element(By.CSS_SELECTOR, f"{operation} .opblock-summary").click()
    wait.until(lambda driver: driver.find_elements(By.CSS_SELECTOR, f"{operation} .try-out__btn")).pop().click()
    wait.until(lambda driver: driver.find_elements(By.CSS_SELECTOR, f"{operation} input[type=file]")).pop().send_keys(
        str(PHOTOS_DIR / "orange.jpg")
    )
    browser.find_element(By.CSS_SELECTOR, f"{operation} .execute").click()
    status = wait.until(
        lambda driver: driver.find_elements(By.CSS_SELECTOR, f"{operation} .live-responses-table .response-col_status")
    ).pop()
    body = browser.find_element(By.CSS_SELECTOR, f"{operation} .live-responses-table .microlight").text
    assert status.text.strip() == "200"
    assert '"label": "Vegetable/Fruit"' in body
