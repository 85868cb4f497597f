"""Browser fixtures for the web export tests: one headless Chromium (WebGL2 on SwiftShader)
for the whole session, and a 127.0.0.1 server over a folder of exports.

Without the browser or playwright the browser tests skip saying why, except in CI
(CI=true), where they fail: .ci/run installs both.
"""

from __future__ import annotations

import functools
import http.server
import os
import shutil
import threading

import pytest

BROWSERS = ("/usr/bin/chromium-headless-shell", "/usr/bin/chromium")
FLAGS = ["--use-angle=swiftshader", "--enable-unsafe-swiftshader", "--no-sandbox"]


def _missing(what: str):
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(f"{what} (CI installs it: see .ci/run)")
    pytest.skip(what)


@pytest.fixture(scope="session")
def browser():
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        _missing('playwright is not installed: pip install "dlc[web]"')
    path = next((p for p in BROWSERS if shutil.which(p)), None)
    if path is None:
        _missing("no headless Chromium: apt-get install chromium-headless-shell")
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=path, args=FLAGS)
        yield b
        b.close()


class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args) -> None:
        pass


@pytest.fixture(scope="session")
def web_root(tmp_path_factory):
    """A folder served on 127.0.0.1 for the session; yields (folder, base URL)."""
    root = tmp_path_factory.mktemp("web")
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(_Quiet, directory=str(root)))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield root, f"http://127.0.0.1:{server.server_address[1]}/"
    server.shutdown()
    server.server_close()


class Page:
    """A browser page opened on an export's index.html, with a loaded model at window.dlcPage."""

    def __init__(self, page):
        self.page = page
        self.errors: list[str] = []
        page.on("pageerror", lambda e: self.errors.append(str(e)))

    def call(self, body: str, arg=None):
        """Run `async (m, arg) => { body }` with the page's model; returns its JSON-able result."""
        return self.page.evaluate(f"async ([arg]) => {{ const m = window.dlcPage.model; {body} }}", [arg])


@pytest.fixture
def open_export(browser, web_root):
    """open_export(name) -> Page on web_root/name/index.html, its model loaded."""
    root, base = web_root
    pages = []

    def opener(name: str) -> Page:
        page = browser.new_page()
        pages.append(page)
        p = Page(page)
        page.goto(f"{base}{name}/index.html")
        page.wait_for_function("window.dlcPage && (window.dlcPage.ready || window.dlcPage.error)", timeout=120_000)
        error = page.evaluate("window.dlcPage.error || null")
        assert error is None, error
        return p

    yield opener
    for page in pages:
        page.close()
