"""The documentation site as a reader meets it: built with --strict, served on loopback, opened
in headless Chromium (Debian's, driven through chromedriver by Selenium). Every command's page
renders with its usage and options, the reference's index links to each, and the search box
finds a command's option and a command by name."""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import click
import pytest

from wlock.cli import cli

ROOT = Path(__file__).resolve().parents[1]
CHROMIUM, CHROMEDRIVER = shutil.which("chromium"), shutil.which("chromedriver")
pytestmark = [
    pytest.mark.newest_only("the documentation site: MkDocs and Chromium, dev tools, not floors"),
    pytest.mark.skipif(not (CHROMIUM and CHROMEDRIVER),
                       reason="Debian's chromium and chromium-driver (.ci/run installs them)"),
]


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    folder = tmp_path_factory.mktemp("site")
    done = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir",
                           str(folder)], cwd=ROOT, capture_output=True, text=True, timeout=300,
                          env={**os.environ, "NO_MKDOCS_2_WARNING": "1"})
    assert done.returncode == 0, done.stderr[-3000:]

    class Quiet(SimpleHTTPRequestHandler):
        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0),
                                 functools.partial(Quiet, directory=str(folder)))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()


@pytest.fixture(scope="module")
def browser(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    webdriver = pytest.importorskip("selenium.webdriver")
    from selenium.webdriver.chrome.options import Options
    from selenium.webdriver.chrome.service import Service

    options = Options()
    options.binary_location = str(CHROMIUM)
    # No network beyond loopback: Chromium's own background connections stay off.
    for flag in ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
                 "--no-first-run", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync",
                 f"--user-data-dir={tmp_path_factory.mktemp('chromium')}"):
        options.add_argument(flag)
    driver = webdriver.Chrome(service=Service(str(CHROMEDRIVER)), options=options)
    try:
        yield driver
    finally:
        driver.quit()


def test_every_commands_page_renders_with_its_usage_and_options(site: str, browser: Any
                                                                 ) -> None:
    from selenium.webdriver.common.by import By

    ctx = click.Context(cli)
    for name in cli.list_commands(ctx):
        browser.get(f"{site}/reference/commands/{name}/")
        assert browser.find_element(By.TAG_NAME, "h1").text == f"wlock {name}", name
        text = browser.find_element(By.CSS_SELECTOR, "article").text
        assert f"wlock {name} [OPTIONS]" in text, (name, text[:500])
        # The help's examples as code, one command a line, as `--help` shows them (they ran
        # together into one paragraph on 19 of 24 pages).
        examples = [b.text for b in browser.find_elements(By.CSS_SELECTOR, "article pre code")
                    if "[OPTIONS]" not in b.text]
        assert any(f"wlock {name}" in b for b in examples), (name, examples)
        assert "Sentinel.UNSET" not in text, name
        command = cli.get_command(ctx, name)
        assert command is not None
        for param in command.params:
            if isinstance(param, click.Option) and not param.hidden:
                assert param.opts[-1] in text, (name, param.opts)
    browser.get(f"{site}/reference/cli/")
    links = {a.get_attribute("href").rstrip("/").rsplit("/", 1)[-1]
             for a in browser.find_elements(By.CSS_SELECTOR, "article a[href*='commands/']")}
    assert set(cli.list_commands(ctx)) <= links, sorted(set(cli.list_commands(ctx)) - links)


@pytest.mark.parametrize(("query", "page"), [("sbom", "reference/commands/sbom/"),
                                             ("checkpoints", "reference/commands/checkpoints/"),
                                             ("rescan", "reference/commands/lock/")])
def test_the_search_box_finds_a_commands_page(site: str, browser: Any, query: str,
                                              page: str) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    browser.get(f"{site}/")
    browser.find_element(By.CSS_SELECTOR, "label.md-header__button[for=__search]").click()
    browser.find_element(By.CSS_SELECTOR, "input[data-md-component=search-query]") \
        .send_keys(query)
    from selenium.common.exceptions import StaleElementReferenceException, TimeoutException

    seen: list[str] = []

    def found(b: Any) -> bool:  # the results are drawn again as the index answers
        try:
            seen[:] = [a.get_attribute("href") or "" for a in
                       b.find_elements(By.CSS_SELECTOR, ".md-search-result__item a")]
        except StaleElementReferenceException:
            return False
        return any(page in href for href in seen)

    try:
        WebDriverWait(browser, 30).until(found)
    except TimeoutException:
        pytest.fail(f"{query!r}: no result for {page} in {seen}")


def test_a_newcomer_finds_installation_and_getting_started(site: str, browser: Any) -> None:
    """The home page shows the install line and the first commands as code, and links the
    Installation and Getting-started pages, which render with their commands."""
    from selenium.webdriver.common.by import By

    browser.get(f"{site}/")
    home = browser.find_element(By.CSS_SELECTOR, "article")
    code = "\n".join(b.text for b in home.find_elements(By.CSS_SELECTOR, "pre code"))
    for line in ("uv tool install .", "wlock init", "wlock add", "wlock sync"):
        assert line in code, (line, code)
    for title, page, words in (("Installation", "install", "pipx install ."),
                               ("Getting started", "getting-started", "wlock demo")):
        link = home.find_element(By.LINK_TEXT, title)
        assert link.get_attribute("href").rstrip("/").endswith(page), title
        browser.get(link.get_attribute("href"))
        assert browser.find_element(By.TAG_NAME, "h1").text == title
        blocks = [b.text for b in browser.find_elements(By.CSS_SELECTOR, "article pre code")]
        assert any(words in b for b in blocks), (title, blocks)
        browser.get(f"{site}/")
        home = browser.find_element(By.CSS_SELECTOR, "article")
