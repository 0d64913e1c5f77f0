"""The course site (scripts/build_site.py, built once per session by the `built_site` fixture) in a
real headless browser: Debian's chromium, driven through the DevTools protocol (websocket-client).

In CI (.ci/run exports FLASH_COURSE_SITE_TEST=1 and installs chromium) a missing browser or site is
a failure; elsewhere these tests skip with the reason. The site is served over HTTP from 127.0.0.1;
it must load nothing from outside (MathJax is a local copy). Screenshots of lesson 02 and of
notebook 02's first figure are saved in build/site-screenshots/.
"""
import base64
import importlib.util
import json
import os
import re
import shutil
import subprocess
import tempfile
import threading
import time
import urllib.request
from functools import partial
from html.parser import HTMLParser
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import unquote, urlsplit

import pytest

ROOT = Path(__file__).resolve().parent.parent
SCREENSHOTS = ROOT / "build" / "site-screenshots"
IN_CI = bool(os.environ.get("FLASH_COURSE_SITE_TEST"))
LESSONS = [p.stem for p in sorted((ROOT / "modules").glob("*.md"))]
NOTEBOOKS = [p.stem for p in sorted((ROOT / "notebooks").glob("*.ipynb"))]

pytestmark = pytest.mark.slow


def unavailable(reason: str):
    if IN_CI:
        pytest.fail(f"{reason} (FLASH_COURSE_SITE_TEST is set: CI must build the site and run this test)")
    pytest.skip(reason)


def chromium_binary() -> str | None:
    if os.environ.get("CHROMIUM"):                  # a name or a path; None when not executable
        return shutil.which(os.environ["CHROMIUM"])
    for name in ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable"):
        if shutil.which(name):
            return shutil.which(name)
    return None


# ---- fixtures: the built site, an HTTP server, the browser ---------------------------------------

@pytest.fixture(scope="module")
def site(built_site):
    if built_site is not None and built_site.html_error:
        pytest.fail(f"the site build failed: {built_site.html_error}", pytrace=False)
    if built_site is None or built_site.html is None or not (built_site.html / "index.html").is_file():
        unavailable("the site was not built (its Python packages are missing: pip install -e '.[site]')")
    return built_site


@pytest.fixture(scope="module")
def server(site):
    class Quiet(SimpleHTTPRequestHandler):
        def log_message(self, *args):
            pass
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), partial(Quiet, directory=str(site.html)))
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()
    httpd.server_close()


class Browser:
    """One headless chromium page, spoken to through the DevTools protocol."""

    def __init__(self, binary: str):
        import websocket
        self.profile = tempfile.mkdtemp(prefix="site-test-chromium-")
        self.proc = subprocess.Popen(
            [binary, "--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
             "--no-first-run", "--no-default-browser-check", "--disable-extensions",
             "--remote-debugging-port=0", "--remote-allow-origins=*", f"--user-data-dir={self.profile}",
             "--window-size=1280,1000", "about:blank"],
            # TMPDIR: chromium's singleton socket folder goes into the profile, removed with it
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=dict(os.environ, TMPDIR=self.profile))
        port_file = Path(self.profile) / "DevToolsActivePort"
        deadline = time.monotonic() + 60
        while not (port_file.is_file() and port_file.read_text().strip()):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                err = self.proc.stderr.read().decode(errors="replace") if self.proc.poll() is not None else ""
                self.close()
                raise RuntimeError(f"chromium did not start its DevTools endpoint: {err[-2000:]}")
            time.sleep(0.1)
        port = int(port_file.read_text().split()[0])
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=30) as r:
            pages = [t for t in json.load(r) if t.get("type") == "page"]
        self.ws = websocket.create_connection(pages[0]["webSocketDebuggerUrl"], timeout=120,
                                              suppress_origin=True)
        self.next_id, self.events = 0, []
        for domain in ("Page", "Runtime", "Log", "Network"):
            self.call(f"{domain}.enable")
        self.call("Emulation.setDeviceMetricsOverride", width=1280, height=1000, deviceScaleFactor=1,
                  mobile=False)

    def call(self, method, **params):
        self.next_id += 1
        mid = self.next_id
        self.ws.send(json.dumps({"id": mid, "method": method, "params": params}))
        while True:
            msg = json.loads(self.ws.recv())
            if msg.get("id") == mid:
                if "error" in msg:
                    raise RuntimeError(f"{method}: {msg['error']}")
                return msg.get("result", {})
            self.events.append(msg)

    def js(self, expression):
        r = self.call("Runtime.evaluate", expression=expression, returnByValue=True, awaitPromise=True)
        if "exceptionDetails" in r:
            raise RuntimeError(f"{expression[:80]}...: {r['exceptionDetails']}")
        return r["result"].get("value")

    def goto(self, url):
        """Load `url` and wait for MathJax's first typesetting (when the page has math)."""
        self.events = []
        self.call("Page.navigate", url=url)
        deadline = time.monotonic() + 120
        while not any(e.get("method") == "Page.loadEventFired" for e in self.events):
            if time.monotonic() > deadline:
                raise TimeoutError(f"{url} did not finish loading")
            self.events.append(json.loads(self.ws.recv()))
        self.js("""new Promise(resolve => { const t0 = Date.now(); (function wait() {
            if (window.MathJax && MathJax.startup && MathJax.startup.promise)
                MathJax.startup.promise.then(() => resolve(true));
            else if (!document.querySelector('.math') || Date.now() - t0 > 30000) resolve(false);
            else setTimeout(wait, 50); })(); })""")
        self.js("document.fonts.ready.then(() => true)")

    def problems(self, origin):
        """Console errors, uncaught exceptions, failed or outside requests since the last goto."""
        out = []
        for e in self.events:
            m, p = e.get("method"), e.get("params", {})
            if m == "Runtime.exceptionThrown":
                out.append(f"exception: {p['exceptionDetails'].get('text')} "
                           f"{p['exceptionDetails'].get('exception', {}).get('description', '')}")
            elif m == "Runtime.consoleAPICalled" and p.get("type") in ("error", "assert"):
                out.append("console.error: " + " ".join(str(a.get("value", a.get("description")))
                                                        for a in p.get("args", [])))
            elif m == "Log.entryAdded" and p["entry"].get("level") == "error":
                out.append(f"log: {p['entry'].get('text')} {p['entry'].get('url', '')}")
            elif m == "Network.loadingFailed" and not p.get("canceled"):
                out.append(f"request failed: {p.get('errorText')} ({p.get('requestId')})")
            elif m == "Network.responseReceived" and p["response"]["status"] >= 400:
                out.append(f"HTTP {p['response']['status']}: {p['response']['url']}")
            elif m == "Network.requestWillBeSent":
                url = p["request"]["url"]
                if not url.startswith((origin, "data:", "blob:", "about:")):
                    out.append(f"request outside the site: {url}")
        return [o for o in out if "/favicon.ico" not in o]      # the browser's own guess, not the site's

    def scroll_to(self, selector):
        self.js(f"""new Promise(resolve => {{
            document.querySelector({json.dumps(selector)}).scrollIntoView({{behavior: 'instant'}});
            requestAnimationFrame(() => requestAnimationFrame(() => resolve(true))); }})""")

    def screenshot(self, path: Path):
        data = self.call("Page.captureScreenshot", format="png")["data"]
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(base64.b64decode(data))

    def close(self):
        try:
            if getattr(self, "ws", None):
                self.ws.close()
        finally:
            if self.proc.poll() is None:
                self.proc.terminate()
                try:
                    self.proc.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    self.proc.kill()
                    self.proc.wait()
            shutil.rmtree(self.profile, ignore_errors=True)


@pytest.fixture(scope="module")
def browser(site):
    binary = chromium_binary()
    if binary is None:
        unavailable("no chromium on this machine (Debian: apt-get install chromium; .ci/run installs it)")
    if importlib.util.find_spec("websocket") is None:
        unavailable("websocket-client is not installed: pip install -e '.[site]'")
    b = Browser(binary)
    yield b
    b.close()


# ---- the pages in the browser --------------------------------------------------------------------

def test_lesson_page_loads(browser, server):
    browser.goto(f"{server}/modules/02_flash_forward.html")
    assert "FlashAttention forward" in browser.js("document.title")
    assert "FlashAttention forward" in browser.js("document.querySelector('h1').textContent")
    assert browser.js("document.querySelectorAll('article h2').length") >= 5, "the lesson's sections"
    assert browser.problems(server) == []
    browser.screenshot(SCREENSHOTS / "02_flash_forward.png")
    browser.scroll_to("#the-online-softmax-step-by-step")
    browser.screenshot(SCREENSHOTS / "02_flash_forward-math.png")


TEXT_OUTSIDE_MATH = """(() => {
    const walk = document.createTreeWalker(document.querySelector('article') || document.body,
                                           NodeFilter.SHOW_TEXT);
    const skip = 'PRE,CODE,SCRIPT,STYLE,TEXTAREA,MJX-CONTAINER,KBD';
    const out = [];
    for (let n = walk.nextNode(); n; n = walk.nextNode())
        if (!n.parentElement.closest(skip)) out.push(n.textContent);
    return out.join(' ');
})()"""
RAW_TEX = re.compile(r"\\\(|\\\)|\\\[|\\\]|\$\$|\$[^$\s][^$]*\$|\\(?:frac|cdot|text|sum|max|log|"
                     r"alpha|ell|mathrm|operatorname|le|ge|approx|top)\b")


@pytest.mark.parametrize("page", [f"modules/{i}" for i in LESSONS] + [f"notebooks/{i}" for i in NOTEBOOKS])
def test_math_renders(browser, server, page):
    browser.goto(f"{server}/{page}.html")
    n_math = browser.js("document.querySelectorAll('article .math').length")
    counts = browser.js("""({containers: document.querySelectorAll('mjx-container').length,
        errors: document.querySelectorAll('mjx-merror, [data-mml-node=merror]').length,
        untypeset: [...document.querySelectorAll('article .math')]
                   .filter(e => !e.querySelector('mjx-container')).map(e => e.textContent.slice(0, 80))})""")
    if page.startswith("modules/"):
        assert n_math > 0, f"{page}: a lesson without any math? ($...$ was not parsed)"
    assert counts["untypeset"] == [], f"{page}: math MathJax did not typeset"
    assert counts["containers"] >= n_math
    assert counts["errors"] == 0, f"{page}: MathJax reports {counts['errors']} TeX errors"
    raw = RAW_TEX.findall(browser.js(TEXT_OUTSIDE_MATH))
    assert raw == [], f"{page}: TeX shown as text: {raw[:10]}"
    assert browser.problems(server) == []


@pytest.mark.parametrize("ex_id", NOTEBOOKS)
def test_notebook_figures_load(browser, server, site, ex_id):
    browser.goto(f"{server}/notebooks/{ex_id}.html")
    imgs = browser.js("""[...document.querySelectorAll('article .cell_output img')].map(
        i => ({src: i.getAttribute('src'), complete: i.complete, width: i.naturalWidth}))""")
    expected = len(site.images(ex_id))
    assert len(imgs) == expected, f"{ex_id}: {expected} image outputs, {len(imgs)} <img> on the page"
    bad = [i for i in imgs if not (i["complete"] and i["width"] > 0)]
    assert bad == [], f"{ex_id}: images that did not load: {bad}"
    assert browser.problems(server) == []
    if ex_id == "02_flash_forward":
        assert imgs, "notebook 02 draws figures"
        browser.scroll_to("article .cell_output img")
        browser.screenshot(SCREENSHOTS / "notebook_02_flash_forward.png")


# ---- the site's files, without a browser -----------------------------------------------------------

class Refs(HTMLParser):
    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.ids, self.refs = set(), []

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        for key in ("id", "name") if tag == "a" else ("id",):
            if a.get(key):
                self.ids.add(a[key])
        for key in ("href", "src"):
            if a.get(key) is not None and tag in ("a", "link", "img", "script", "iframe", "source"):
                self.refs.append((tag, a[key]))


def test_no_broken_internal_links(site):
    """Every internal href and src of every page names a file of the site, and every #anchor an id
    of its page. A lesson's link to a repository file that is not a page (an exercise, a solution)
    must have been rendered as code by build_site.py, and a link to nothing at all is broken here."""
    pages = {p: None for p in site.html.rglob("*.html")}

    def parsed(p):
        if pages.get(p) is None:
            pages[p] = Refs()
            pages[p].feed(p.read_text(errors="replace"))
        return pages[p]

    broken, checked = [], 0
    for page in sorted(pages):
        for tag, ref in parsed(page).refs:
            u = urlsplit(ref)
            if u.scheme or u.netloc:
                if tag != "a" and u.scheme not in ("data",):
                    broken.append(f"{page.relative_to(site.html)}: <{tag}> loads {ref} from outside the site")
                continue
            target = page if not u.path else (page.parent / unquote(u.path)).resolve()
            if u.path.endswith("/"):
                target = target / "index.html"
            checked += 1
            rel = page.relative_to(site.html)
            if not target.is_relative_to(site.html.resolve()) or not target.is_file():
                broken.append(f"{rel}: {ref} (no such file)")
            elif u.fragment and target.suffix == ".html" and unquote(u.fragment) not in parsed(target).ids:
                broken.append(f"{rel}: {ref} (no element with that id)")
    assert checked > 100
    assert broken == [], "broken links:\n" + "\n".join(broken[:40])


def test_site_build_has_no_warnings(site):
    """Sphinx's warnings name what renders wrongly: a link to a missing file, a bad directive."""
    assert site.warnings == [], "\n".join(site.warnings)


def test_grader_reference_matches_the_parser(site):
    import argparse
    from grader.cli import build_parser
    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    html = site.page("grader").read_text()
    for name, p in sub.choices.items():
        assert f'id="grader-{name}"' in html, f"grader {name} has no section"
        for action in p._actions:
            for opt in action.option_strings:
                if action.help != argparse.SUPPRESS:
                    assert opt in html, f"grader {name} {opt} is not documented"
