#!/usr/bin/python3
"""The book's site, opened in a real browser: every page, link, image and search.

    check_site.py SITE_DIR BOOK_DIR

SITE_DIR is what `mkdocs build` wrote (./labkit book: out/book); BOOK_DIR the
chapters it was built from (book/NN-name.md). The site is served over http on
a free localhost port and opened in Debian's chromium, headless, driven over
the Chrome DevTools Protocol on a pipe (--remote-debugging-pipe: JSON messages
ended by a NUL byte, commands on fd 3, replies and events on fd 4; no port, no
websocket, nothing but the standard library). It checks:

  - every chapter is a page, titled by its first heading, reached from the
    home page by following links;
  - every page loads with no console error, no uncaught exception, no failed
    or refused request, and no request off this machine (the site must work
    offline: no fonts or scripts from a CDN);
  - every <a href> into the site resolves: the page or file exists, and a
    #fragment names an element on that page;
  - every <img> loaded (naturalWidth > 0; the figures are SVG and PNG);
  - typing a term from each chapter into the search box lists that chapter;
  - the palette toggle switches between light and dark.

Each failure names its page and what broke; the exit status is the number of
failures (capped at 100), 0 when the site is whole.
"""
import collections
import functools
import http.server
import json
import os
import pathlib
import re
import select
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.parse
import urllib.request

CHROMIUM = os.environ.get("CHROMIUM", "/usr/bin/chromium")
# Debian's chromium hangs on a closed network unless told not to phone home.
CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync",
                  "--disable-default-apps", "--mute-audio", "--remote-debugging-pipe"]
TIMEOUT = 20.0  # seconds for any one thing: a command's reply, a page's load, a search's results

failures = []


def fail(where, what):
    if f"{where}: {what}" in failures:
        return  # the same link in the nav and the page, say
    failures.append(f"{where}: {what}")
    print(f"FAIL {where}: {what}", flush=True)


# ---------------------------------------------------------------------------
# The chapters, as the book has them

Chapter = collections.namedtuple("Chapter", "stem title path words")


def read_chapters(book_dir):
    """book/NN-name.md, in name order: the first is the home page (site/hooks.py)."""
    chapters = []
    files = sorted(pathlib.Path(book_dir).glob("[0-9][0-9]-*.md"))
    for i, md in enumerate(files):
        text = md.read_text(encoding="utf-8")
        title = next((line[2:].strip() for line in text.splitlines() if line.startswith("# ")), None)
        prose = re.sub(r"^(```|~~~).*?^\1", " ", text, flags=re.S | re.M)  # search indexes code too; prefer prose
        words = set(re.findall(r"[a-z]{4,}", prose.lower()))
        chapters.append(Chapter(md.stem, title, "/" if i == 0 else f"/{md.stem}.html", words))
    return chapters


# lunr's English stop words (never indexed, so never found), and a few more too common to pick.
STOP = set("able about across after almost also among because been cannot could dear does either else ever "
           "every from have hers however into just least likely might most must neither often only other "
           "rather said says should since some than that their them then there these they this twas wants "
           "were what when where which while whom will with would your each many more such here over".split())


def search_term(chapter, chapters):
    """A word of the chapter's title in as few other chapters as can be (so the
    chapter is among the first results); failing that, its rarest prose word."""
    def spread(word):
        return sum(word in c.words for c in chapters)
    title_words = [w for w in re.findall(r"[a-z]{4,}", chapter.title.lower())
                   if w not in STOP and w in chapter.words]
    candidates = title_words or sorted(chapter.words - STOP)
    return min(candidates, key=lambda w: (spread(w), -len(w), w))


# ---------------------------------------------------------------------------
# A tiny http server for SITE_DIR, on a free port, in a thread

class QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


def serve(site_dir):
    handler = functools.partial(QuietHandler, directory=site_dir)
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, f"http://127.0.0.1:{server.server_address[1]}"


# ---------------------------------------------------------------------------
# Chromium over the DevTools Protocol, on a pipe

class Browser:
    def __init__(self, log_path):
        self.profile = tempfile.mkdtemp(prefix="labkit-site-chromium-")
        to_chrome_r, self.to_chrome = os.pipe()
        self.from_chrome, from_chrome_w = os.pipe()
        # The protocol wants fd 3 (commands in) and fd 4 (replies out) in chromium. The
        # shell moves them there; to_chrome_r is the lower of the two, so the first move
        # cannot overwrite the second's source.
        self.log = open(log_path, "wb")
        self.proc = subprocess.Popen(
            ["/bin/sh", "-c", f'exec "$0" "$@" 3<&{to_chrome_r} 4>&{from_chrome_w}',
             CHROMIUM, *CHROMIUM_FLAGS, f"--user-data-dir={self.profile}", "about:blank"],
            pass_fds=(to_chrome_r, from_chrome_w), stdin=subprocess.DEVNULL,
            stdout=self.log, stderr=subprocess.STDOUT)
        os.close(to_chrome_r)
        os.close(from_chrome_w)
        self.buffer = b""
        self.next_id = 0
        self.replies = {}
        self.events = []           # (session, method, params), in arrival order
        self.on_attach = None      # called with each new session (a worker)

    def close(self):
        try:
            self.send("Browser.close", timeout=5)
        except Exception:
            pass
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.log.close()
        shutil.rmtree(self.profile, ignore_errors=True)

    def _read(self, deadline):
        """Read what chromium wrote before the deadline; False on timeout."""
        left = deadline - time.monotonic()
        if left <= 0 or not select.select([self.from_chrome], [], [], left)[0]:
            return False
        chunk = os.read(self.from_chrome, 1 << 20)
        if not chunk:
            raise RuntimeError(f"chromium exited (status {self.proc.poll()}); see its log")
        self.buffer += chunk
        *messages, self.buffer = self.buffer.split(b"\0")
        for raw in messages:
            message = json.loads(raw)
            if "id" in message:
                self.replies[message["id"]] = message
            else:
                session, method, params = message.get("sessionId"), message["method"], message.get("params", {})
                self.events.append((session, method, params))
                if method == "Target.attachedToTarget" and self.on_attach:
                    self.on_attach(params)
        return True

    def post(self, method, params=None, session=None):
        """Send a command, do not wait for its reply; its id."""
        self.next_id += 1
        message = {"id": self.next_id, "method": method, "params": params or {}}
        if session:
            message["sessionId"] = session
        os.write(self.to_chrome, json.dumps(message).encode() + b"\0")
        return self.next_id

    def send(self, method, params=None, session=None, timeout=TIMEOUT):
        """Send a command and wait for its result."""
        id = self.post(method, params, session)
        deadline = time.monotonic() + timeout
        while id not in self.replies:
            if not self._read(deadline):
                raise TimeoutError(f"no reply to {method} in {timeout} s")
        reply = self.replies.pop(id)
        if "error" in reply:
            raise RuntimeError(f"{method}: {reply['error'].get('message')}")
        return reply.get("result", {})

    def wait_for(self, predicate, timeout=TIMEOUT):
        """Read events until predicate() holds; False if it never did."""
        deadline = time.monotonic() + timeout
        while not predicate():
            if not self._read(deadline):
                return predicate()
        return True

    def pump(self, seconds):
        """Take in events for a while."""
        deadline = time.monotonic() + seconds
        while self._read(deadline):
            pass


class Page:
    """One tab, with its workers (Material's search runs in one): every console
    error, exception and failed or off-machine request is kept against the
    page that was open when it happened."""

    def __init__(self, browser, origin):
        self.browser, self.origin = browser, origin
        self.current = "(no page)"
        self.problems = []         # (page, what)
        self.in_flight = {}        # requestId -> url (a worker's script starts in the page, ends in the worker)
        self.seen = 0              # events of self.browser.events already looked at
        browser.on_attach = self._attached
        target = browser.send("Target.createTarget", {"url": "about:blank"})["targetId"]
        self.session = browser.send("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
        self._enable(self.session)
        browser.send("Page.enable", session=self.session)
        # Workers start paused until their domains are on, so none of their errors is missed.
        browser.send("Target.setAutoAttach", {"autoAttach": True, "waitForDebuggerOnStart": True,
                                              "flatten": True}, session=self.session)

    def _enable(self, session):
        for domain in ("Runtime", "Network", "Log"):
            self.browser.post(f"{domain}.enable", session=session)

    def _attached(self, params):
        session = params["sessionId"]
        self._enable(session)
        self.browser.post("Runtime.runIfWaitingForDebugger", session=session)

    def evaluate(self, expression):
        result = self.browser.send("Runtime.evaluate", {"expression": expression, "returnByValue": True,
                                                        "awaitPromise": True}, session=self.session)
        if "exceptionDetails" in result:
            raise RuntimeError(f"evaluating in {self.current}: {result['exceptionDetails']}")
        return result["result"].get("value")

    def _scan(self):
        """Turn the events since the last scan into problems; True when the network is quiet."""
        events = self.browser.events
        for session, method, p in events[self.seen:]:
            if method == "Network.requestWillBeSent":
                url = p["request"]["url"]
                if not url.startswith((self.origin + "/", "data:", "blob:", "about:")):
                    self.problems.append((self.current, f"requests {url} from off this machine "
                                                        "(the site must work offline)"))
                self.in_flight[p["requestId"]] = url
            elif method == "Network.responseReceived" and p["response"]["status"] >= 400:
                self.problems.append((self.current, f"HTTP {p['response']['status']} for {p['response']['url']}"))
            elif method in ("Network.loadingFinished", "Network.loadingFailed"):
                url = self.in_flight.pop(p["requestId"], "?")
                if method == "Network.loadingFailed" and not p.get("canceled"):
                    self.problems.append((self.current, f"request failed ({p.get('errorText')}): {url}"))
            elif method == "Runtime.consoleAPICalled" and p["type"] in ("error", "assert"):
                text = " ".join(str(a.get("value", a.get("description", ""))) for a in p.get("args", []))
                self.problems.append((self.current, f"console.{p['type']}: {text}"))
            elif method == "Runtime.exceptionThrown":
                d = p["exceptionDetails"]
                text = d.get("exception", {}).get("description") or d.get("text")
                self.problems.append((self.current, f"uncaught exception: {text} ({d.get('url', '')}:{d.get('lineNumber')})"))
            elif method == "Log.entryAdded" and p["entry"]["level"] == "error":
                e = p["entry"]
                self.problems.append((self.current, f"console error ({e['source']}): {e['text']} {e.get('url', '')}"))
        self.seen = len(events)
        return not self.in_flight

    def quiet(self, settle=0.3):
        """Wait until no request has been in flight for `settle` seconds."""
        deadline = time.monotonic() + TIMEOUT
        while time.monotonic() < deadline:
            self.browser.pump(settle)
            if self._scan() and not self.browser.buffer:
                return True
        return False

    def open(self, path):
        self.current = path
        loaded = len(self.browser.events)
        result = self.browser.send("Page.navigate", {"url": self.origin + path}, session=self.session)
        if result.get("errorText"):
            self.problems.append((path, f"does not load: {result['errorText']}"))
            return False

        def load_fired():
            return any(s == self.session and m == "Page.loadEventFired" for s, m, _ in self.browser.events[loaded:])
        if not self.browser.wait_for(load_fired):
            self.problems.append((path, f"no load event in {TIMEOUT} s"))
            return False
        if not self.quiet():
            self.problems.append((path, f"requests still in flight after {TIMEOUT} s: {sorted(self.in_flight.values())}"))
        return True


# ---------------------------------------------------------------------------
# The checks

PAGE_FACTS = """(() => ({
  status: performance.getEntriesByType("navigation")[0]?.responseStatus,
  title: document.title,
  h1: document.querySelector("article h1")?.textContent.replace(/\\s*¶$/, "").trim() ?? null,
  ids: [...document.querySelectorAll("[id], a[name]")].map(e => e.id || e.name),
  links: [...document.querySelectorAll("a[href]")].map(a => ({href: a.href, raw: a.getAttribute("href")})),
  images: [...document.images].map(i => ({src: i.currentSrc || i.src, complete: i.complete, width: i.naturalWidth})),
}))()"""

IMAGES_DONE = "[...document.images].every(i => i.complete)"


def normal(url):
    """A site URL as the page it names: /x/ for /x/index.html, no fragment."""
    path = urllib.parse.urlsplit(url).path
    return path[: -len("index.html")] if path.endswith("/index.html") else path


def is_page(path):
    return path.endswith("/") or path.endswith(".html")


def crawl(page, origin, chapters):
    """Open every page reachable from the home page; the facts of each."""
    facts = {}
    todo = ["/"] + [c.path for c in chapters]
    while todo:
        path = todo.pop(0)
        if path in facts or path == "/404.html":
            continue
        if not page.open(path):
            facts[path] = None
            continue
        deadline = time.monotonic() + TIMEOUT
        while not page.evaluate(IMAGES_DONE) and time.monotonic() < deadline:
            page.browser.pump(0.1)
        facts[path] = page.evaluate(PAGE_FACTS)
        if facts[path]["status"] != 200:
            facts[path] = None  # the failed request is reported with the page's other problems
            continue
        for link in facts[path]["links"]:
            if link["href"].startswith(origin + "/") and is_page(normal(link["href"])):
                todo.append(normal(link["href"]))
    page.quiet()
    return facts


def check_chapters(facts, chapters):
    for c in chapters:
        f = facts.get(c.path)
        if f is None:
            fail(f"book/{c.stem}.md", f"has no page at {c.path}")
        elif f["h1"] != c.title:
            fail(c.path, f"heading is {f['h1']!r}, the chapter's is {c.title!r}")
        elif not f["title"].startswith(c.title):
            fail(c.path, f"page title is {f['title']!r}, expected it to start with {c.title!r}")


def check_links(facts, origin):
    files = {}  # a linked file that is not a page: its HTTP status
    for path, f in facts.items():
        for link in f["links"] if f else []:
            url = urllib.parse.urlsplit(link["href"])
            if not link["href"].startswith(origin + "/"):
                continue  # off the site (GitHub, the Perfetto UI): not fetched here
            target = normal(link["href"])
            what = f"link {link['raw']!r} (to {target}{'#' + url.fragment if url.fragment else ''})"
            if is_page(target):
                if facts.get(target) is None:
                    fail(path, f"{what}: no such page")
                elif url.fragment and urllib.parse.unquote(url.fragment) not in facts[target]["ids"]:
                    fail(path, f"{what}: no element with id {url.fragment!r} there")
            else:
                if target not in files:
                    try:
                        files[target] = urllib.request.urlopen(origin + target, timeout=TIMEOUT).status
                    except urllib.error.HTTPError as e:
                        files[target] = e.code
                if files[target] != 200:
                    fail(path, f"{what}: HTTP {files[target]}")


def check_images(facts):
    for path, f in facts.items():
        for image in f["images"] if f else []:
            if not image["complete"] or image["width"] == 0:
                fail(path, f"image {image['src']} did not load ({'still loading' if not image['complete'] else 'broken'})")


def check_search(page, chapters):
    """Type each chapter's term into Material's search box, as a reader would."""
    page.open("/")
    for c in chapters:
        term = search_term(c, chapters)
        page.evaluate("""(() => { const q = document.querySelector("[data-md-component=search-query]");
                                  q.value = ""; q.focus(); })()""")
        for ch in term:
            page.browser.send("Input.dispatchKeyEvent", {"type": "keyDown", "text": ch, "key": ch}, session=page.session)
            page.browser.send("Input.dispatchKeyEvent", {"type": "keyUp", "key": ch}, session=page.session)
        results = []
        # Results come from Material's search worker, which first indexes the whole
        # site: on a loaded machine (CI's two cores, the other tests beside it) it
        # may take longer than a page to answer, so a search gets three times the patience.
        deadline = time.monotonic() + 3 * TIMEOUT

        def listed():
            nonlocal results
            results = page.evaluate("""(() => {
              const q = document.querySelector("[data-md-component=search-query]");
              const r = document.querySelector(".md-search-result__list");
              return {query: q.value, links: [...r.querySelectorAll("a.md-search-result__link")].map(a => a.href)};
            })()""")
            return results["query"] == term and any(normal(h) == c.path for h in results["links"])
        # Seen once is found: the list re-renders as the worker answers each
        # keystroke's query, so asking again could catch it in between.
        found = listed()
        while not found and time.monotonic() < deadline:
            page.browser.pump(0.1)
            found = listed()
        if not found:
            shown = sorted({normal(h) for h in results["links"]})
            fail(c.path, f"searching for {term!r} does not list it (results: {shown or 'none'})")
        else:
            print(f"ok   search {term!r} finds {c.path}", flush=True)
    page.quiet()


def check_palette(page):
    """The toggle flips the colour scheme, light to dark and back."""
    page.open("/")
    scheme = "document.body.getAttribute('data-md-color-scheme')"
    before = page.evaluate(scheme)
    page.evaluate("document.querySelector('.md-header label.md-header__button[for^=__palette]').click()")
    after = page.evaluate(scheme)
    if {before, after} != {"default", "slate"}:
        fail("/", f"palette toggle: scheme {before!r} became {after!r}, expected light (default) <-> dark (slate)")


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    site_dir, book_dir = sys.argv[1:]
    if not os.path.isfile(os.path.join(site_dir, "index.html")):
        sys.exit(f"check_site: no {site_dir}/index.html: build the site first (./labkit book)")
    chapters = read_chapters(book_dir)
    if not chapters:
        sys.exit(f"check_site: no chapters (NN-name.md) in {book_dir}")
    start = time.monotonic()
    server, origin = serve(site_dir)
    log_path = os.path.join(os.path.dirname(os.path.abspath(site_dir)), "chromium.log")
    browser = Browser(log_path)
    try:
        page = Page(browser, origin)
        facts = crawl(page, origin, chapters)
        pages, links, images = len(facts), sum(len(f["links"]) for f in facts.values() if f), \
            sum(len(f["images"]) for f in facts.values() if f)
        print(f"ok   opened {pages} pages ({links} links, {images} images) at {origin} "
              f"({time.monotonic() - start:.1f} s)", flush=True)
        check_chapters(facts, chapters)
        check_links(facts, origin)
        check_images(facts)
        check_search(page, chapters)
        check_palette(page)
        page.quiet()
        for where, what in page.problems:
            fail(where, what)
    except (RuntimeError, TimeoutError) as e:
        fail("chromium", f"{e} (its log: {log_path})")
    finally:
        browser.close()
        server.shutdown()
    took = time.monotonic() - start
    if failures:
        print(f"\n{len(failures)} problem(s) in the site at {site_dir} ({took:.1f} s):", file=sys.stderr)
        for f in failures:
            print(f"  {f}", file=sys.stderr)
        return min(len(failures), 100)
    print(f"site OK: {len(chapters)} chapters, {pages} pages, {links} links, {images} images, "
          f"search and palette, no console error, nothing off this machine ({took:.1f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
