"""The rendered book in a real browser: headless Chromium opens every page of the built book.

It fails on a broken internal link or anchor, math that MathJax did not render (raw TeX left in the text, or a
MathJax error), an image or other file of the book that does not load, a JavaScript error, a notebook page
without its executed outputs, and a Colab button that does not open the page's own notebook. Screenshots of a
few pages, and of every diagram (SVG) in its chapter with the text around it, go to
``_build/screenshots/`` for review.

- Chromium: Debian's ``chromium`` package (``MHSA_CHROMIUM`` names another executable), driven by Playwright.
  Without either, the tests skip and say why; in CI (``CI=true``) they fail instead.
- The book: ``_build/html``, rebuilt first (strict) when it is missing or older than its sources; the build
  test of ``test_book.py`` has usually just made it. ``MHSA_BOOK_HTML`` points at another build, used as it is.
- MathJax: the book serves its own copy (``chapters/_ext/mathjax_local.py``), and the browser reaches nothing
  but the book, so a page that still asked a CDN for MathJax would show raw TeX and fail the math check.
- Narrow screens: every chapter is opened again 390 px wide (a phone) to check that nothing makes the page
  wider than the screen and that no formula or table is cut off (``_static/narrow-screens.css``).
"""

import functools
import http.server
import json
import os
import re
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path
from urllib.parse import unquote, urljoin, urlsplit

import pytest
import yaml

from paths import ROOT

pytestmark = pytest.mark.book  # needs the built book, and builds it when it is missing

HTML = Path(os.environ.get("MHSA_BOOK_HTML", ROOT / "_build" / "html")).resolve()
BOOK = HTML.parents[1]  # the book's sources: _config.yml, _toc.yml, chapters/
SCREENSHOTS = HTML.parent / "screenshots"
# (page, element to scroll to or None): the landing page, a chapter's math and figures, the appendix
SCREENSHOT_PAGES = [
    ("chapters/preface.html", None),
    ("chapters/preface.html", "#fig-learning-path"),
    ("chapters/02_attention_table.html", "#ch02-scaling"),
    ("chapters/02_attention_table.html", "#ch02-softmax"),
    ("chapters/glossary.html", None),
    ("chapters/api.html", None),
]
CHROMIUM_FLAGS = [
    "--no-sandbox",  # CI runs as root
    "--disable-gpu",
    "--disable-dev-shm-usage",
    "--disable-background-networking",  # no calls home on a machine without internet
    "--disable-component-update",
    "--disable-sync",
    "--disable-quic",
    "--no-first-run",
]

# sphinx-thebe 0.3.1 writes its settings script into every page twice; the second copy fails to redeclare
# its constants, harmlessly (the first copy set them, and thebe is off in this book).
KNOWN_JS_ERRORS = re.compile(r"^Identifier 'THEBE_JS_URL' has already been declared$")

# MathJax's script is deferred, so by the load event it has run, or failed to load. Then wait for its first
# typesetting pass (30 s at most).
TYPESET = """
() => !(window.MathJax && MathJax.startup)
  ? "MathJax did not load (not served by the book? See this file's docstring)"
  : Promise.race([MathJax.startup.promise.then(() => true),
                  new Promise((resolve) => setTimeout(() => resolve("MathJax did not finish"), 30000))])
"""

# Runs in each page once MathJax has finished: everything the checks need, as plain data.
COLLECT = r"""
async () => {
  const images = [...document.images];
  images.forEach((img) => { img.loading = "eager"; });
  const settle = (img) => img.decode().catch(() => null);
  await Promise.race([Promise.all(images.map(settle)),
                      new Promise((resolve) => setTimeout(resolve, 10000))]);
  const ignored = "pre, code, script, style, textarea, mjx-container, .highlight";
  const rawTex = [];
  const walker = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT);
  const texPattern = /\$\$|\\\(|\\\)|\\\[|\\\]|\\begin\{|\$[^$\n]*[\\^_][^$\n]*\$/;
  while (walker.nextNode()) {
    const node = walker.currentNode;
    if (!node.parentElement || node.parentElement.closest(ignored)) continue;
    if (texPattern.test(node.data)) rawTex.push(node.data.trim().slice(0, 120));
  }
  return {
    url: location.href,
    title: document.title,
    ids: [...document.querySelectorAll("[id]")].map((e) => e.id)
      .concat([...document.querySelectorAll("a[name]")].map((e) => e.name)),
    links: [...document.querySelectorAll("a[href]")].map((a) => ({
      href: a.href, raw: a.getAttribute("href"), text: a.textContent.trim().slice(0, 60)})),
    images: images.map((img) => ({
      src: img.currentSrc || img.src, loaded: img.complete && img.naturalWidth > 0,
      alt: img.getAttribute("alt") || ""})),
    mathjax: typeof window.MathJax === "object" && !!window.MathJax.startup,
    math: document.querySelectorAll(".math").length,
    mathUnrendered: [...document.querySelectorAll(".math")]
      .filter((e) => !e.querySelector("mjx-container"))
      .map((e) => e.textContent.trim().slice(0, 120)),
    mathErrors: [...document.querySelectorAll("mjx-merror, [data-mjx-error]")]
      .map((e) => (e.getAttribute("data-mjx-error") || e.textContent).slice(0, 120))
      .concat([...document.querySelectorAll('mjx-assistive-mml mtext[mathcolor="red"]')]
        .map((e) => e.textContent).filter((t) => t.startsWith("\\"))  // an undefined macro
        .map((t) => `undefined macro ${t}`)),
    rawTex,
    codeCells: document.querySelectorAll(".cell .cell_input").length,
    outputCells: document.querySelectorAll(".cell .cell_output").length,
    errorOutputs: document.querySelectorAll(".cell_output .output.traceback").length,
    colab: [...document.querySelectorAll('a[href*="colab.research.google.com"]')].map((a) => a.href),
  };
}
"""


EMPTY = {"ids": [], "links": [], "images": [], "math": 0, "mathUnrendered": [], "mathErrors": [],
         "rawTex": [], "codeCells": 0, "outputCells": 0, "errorOutputs": 0, "colab": [], "failed": [],
         "js_errors": [], "typeset": None}


def skip_or_fail(reason):
    """Skip on a developer's machine; fail in CI (``CI=true``), where a skipped check would pass unseen."""
    if os.environ.get("CI", "").lower() in ("1", "true"):
        pytest.fail(reason + " (required when CI is set)")
    pytest.skip(reason)


def chromium_executable():
    if "MHSA_CHROMIUM" in os.environ:
        candidates = [os.environ["MHSA_CHROMIUM"]]
    else:
        candidates = [shutil.which("chromium"), "/usr/bin/chromium"]
    return next((c for c in candidates if c and Path(c).is_file() and os.access(c, os.X_OK)), None)


def book_sources():
    yield from (BOOK / name for name in ("_config.yml", "_toc.yml", "references.bib"))
    yield from (p for p in (BOOK / "chapters").rglob("*")
                if not {".ipynb_checkpoints", "__pycache__"} & set(p.parts))
    yield from (ROOT / "mhsa").rglob("*.py")  # the API reference is made from the docstrings


def built_at():
    stamps = [HTML / ".buildinfo", HTML / "searchindex.js"]
    times = [p.stat().st_mtime for p in stamps if p.exists()]
    return min(times) if len(times) == len(stamps) else None


def ensure_built():
    """Build the book (strict) unless ``HTML`` holds a build newer than every source."""
    if "MHSA_BOOK_HTML" in os.environ:
        if not (HTML / "index.html").exists():
            pytest.fail(f"MHSA_BOOK_HTML={HTML} holds no built book (no index.html)")
        return
    stamp = built_at()
    newest = max(p.stat().st_mtime for p in book_sources() if p.is_file())
    if stamp is not None and stamp >= newest:
        return
    jupyter_book = Path(sys.executable).with_name("jupyter-book")
    command = [str(jupyter_book), "build", str(ROOT), "-n", "-W", "--keep-going"]
    result = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=1500,
                            check=False)
    assert result.returncode == 0, (
        "the book does not build:\n" + result.stdout[-3000:] + result.stderr[-3000:])


class QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format, *args):
        pass


@pytest.fixture(scope="module")
def crawl():
    """Open every page of the book in Chromium; return what each page showed, keyed by path."""
    chromium = chromium_executable()
    if chromium is None:
        skip_or_fail("Chromium not found: install Debian's `chromium` package (apt-get install chromium) "
                     "or set MHSA_CHROMIUM to run the browser check of the rendered book")
    try:
        from playwright import sync_api
    except ImportError:
        skip_or_fail("the browser check needs the `playwright` package (requirements.txt)")
    ensure_built()
    server = http.server.ThreadingHTTPServer(
        ("127.0.0.1", 0), functools.partial(QuietHandler, directory=str(HTML)))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    base = f"http://127.0.0.1:{server.server_address[1]}/"
    pages = sorted(p.relative_to(HTML).as_posix() for p in HTML.rglob("*.html")
                   if p.relative_to(HTML).parts[0] not in ("_static", "_sources", "_images"))
    started = time.monotonic()
    try:
        with sync_api.sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path=chromium, args=CHROMIUM_FLAGS)
            context = browser.new_context(viewport={"width": 1280, "height": 900})
            context.route("**/*", functools.partial(route, base))
            results = {path: visit(context, base, path) for path in pages}
            take_screenshots(context, base)
            browser.close()
    finally:
        server.shutdown()
        server.server_close()
    elapsed = time.monotonic() - started
    print(f"browser check: {len(pages)} pages in {elapsed:.1f} s; screenshots in {SCREENSHOTS}")
    return {"base": base, "pages": results}


def route(base, route_, request):
    """Serve the book, MathJax included; block everything else (CDNs, fonts, analytics, other sites)."""
    if request.url.startswith((base, "data:")):
        return route_.continue_()
    return route_.abort()


REDIRECT = re.compile(r'<meta http-equiv="refresh" content="\d+;\s*url=([^"]+)"', re.IGNORECASE)


def visit(context, base, path):
    redirect = REDIRECT.search((HTML / path).read_text(errors="replace"))
    if redirect:  # index.html sends the reader to the root page: check that link, nothing else
        href = urljoin(base + path, redirect[1])
        return {**EMPTY, "links": [{"href": href, "raw": redirect[1], "text": "(redirect)"}]}
    page = context.new_page()
    failures, errors = [], []
    page.on("requestfailed", lambda r: r.url.startswith(base) and failures.append(r.url))
    page.on("response", lambda r: r.url.startswith(base) and r.status >= 400
            and failures.append(f"{r.status} {r.url}"))
    page.on("pageerror", lambda e: errors.append(str(e)[:200]))
    page.goto(base + path, wait_until="load")
    typeset = None
    if page.evaluate("() => document.querySelectorAll('.math').length") > 0:
        typeset = page.evaluate(TYPESET)
    result = page.evaluate(COLLECT)
    result.update(failed=failures, js_errors=errors, typeset=typeset)
    page.close()
    return result


def take_screenshots(context, base):
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    page = context.new_page()
    for path, anchor in SCREENSHOT_PAGES:
        if not (HTML / path).exists():
            continue
        page.goto(base + path + (anchor or ""), wait_until="load")
        page.evaluate("() => window.MathJax && MathJax.startup ? MathJax.startup.promise : null")
        if anchor:
            page.evaluate("(id) => document.getElementById(id)?.scrollIntoView()", anchor[1:])
        name = Path(path).stem + (f"-{anchor[1:]}" if anchor else "") + ".png"
        page.screenshot(path=str(SCREENSHOTS / name))
    for path in sorted(p.relative_to(HTML).as_posix() for p in (HTML / "chapters").glob("*.html")):
        page.goto(base + path, wait_until="load")
        page.evaluate("() => window.MathJax && MathJax.startup ? MathJax.startup.promise : null")
        for diagram in page.locator("main img[src$='.svg']").all():  # each diagram with its text
            diagram.evaluate("e => e.scrollIntoView({block: 'center'})")
            stem = Path(diagram.get_attribute("src")).stem
            page.screenshot(path=str(SCREENSHOTS / f"{Path(path).stem}-diagram-{stem}.png"))
    page.close()


def local_target(base, href):
    """(path relative to the book, fragment) of a link into the book, or None for other links."""
    if not href.startswith(base):
        return None
    parts = urlsplit(href)
    path = unquote(parts.path).lstrip("/")
    if path == "" or path.endswith("/"):
        path += "index.html"
    return path, unquote(parts.fragment)


def notebook_pages():
    """Page path -> its notebook's cells, for every page made from a notebook."""
    sources = HTML / "_sources"
    return {nb.relative_to(sources).with_suffix(".html").as_posix(): json.loads(nb.read_text())["cells"]
            for nb in sources.rglob("*.ipynb")}


def test_every_page_was_opened(crawl):
    pages = crawl["pages"]
    assert "chapters/preface.html" in pages, sorted(pages)
    for path in notebook_pages():
        assert path in pages, f"{path}: a notebook without a page"


def test_internal_links_and_anchors_resolve(crawl):
    base, pages = crawl["base"], crawl["pages"]
    ids = {path: set(result["ids"]) for path, result in pages.items()}
    broken = []
    for path, result in pages.items():
        for link in result["links"]:
            target = local_target(base, link["href"])
            if target is None or link["raw"].startswith(("javascript:", "mailto:")):
                continue
            file, fragment = target
            if not (HTML / file).exists():
                broken.append(f"{path}: {link['raw']!r} ({link['text']!r}) -> missing file {file}")
            elif fragment and file.endswith(".html") and fragment not in ids.get(file, set()):
                broken.append(f"{path}: {link['raw']!r} ({link['text']!r}) -> no #{fragment} in {file}")
    assert not broken, "broken links:\n" + "\n".join(broken)


def test_math_is_rendered_by_mathjax(crawl):
    problems = []
    for path, result in crawl["pages"].items():
        if result["math"] and result["typeset"] is not True:
            problems.append(f"{path}: {result['typeset']}")
            continue
        problems += [f"{path}: not typeset: {m!r}" for m in result["mathUnrendered"]]
        problems += [f"{path}: MathJax error: {m!r}" for m in result["mathErrors"]]
        problems += [f"{path}: raw TeX in the text: {m!r}" for m in result["rawTex"]]
    assert not problems, "\n".join(problems)


def test_images_and_files_of_the_book_load(crawl):
    problems = []
    for path, result in crawl["pages"].items():
        problems += [f"{path}: image not loaded: {i['src']}" for i in result["images"] if not i["loaded"]]
        problems += [f"{path}: request failed: {url}" for url in result["failed"]]
    assert not problems, "\n".join(problems)


def test_every_image_has_alt_text(crawl):
    # Sphinx falls back to the file name ("../_images/<hash>.png"): that is no description.
    # The theme's own icons (_static/, e.g. the module index's "-") are not content.
    problems = [f"{path}: image without alt text: {i['src']} (alt {i['alt']!r})"
                for path, result in crawl["pages"].items() for i in result["images"]
                if "/_static/" not in i["src"]
                and (len(i["alt"]) < 5 or i["alt"].endswith((".png", ".svg", ".jpg")))]
    assert not problems, "\n".join(problems)


def test_pages_run_without_javascript_errors(crawl):
    problems = [f"{path}: {e}" for path, result in crawl["pages"].items() for e in result["js_errors"]
                if not KNOWN_JS_ERRORS.search(e)]
    assert not problems, "\n".join(problems)


def test_notebook_pages_show_their_executed_outputs(crawl):
    problems = []
    for path, cells in notebook_pages().items():
        result = crawl["pages"][path]
        code = [c for c in cells if c["cell_type"] == "code" and "".join(c["source"]).strip()]
        shown = [c for c in code if "remove-cell" not in c["metadata"].get("tags", [])]
        with_output = [c for c in shown if c["outputs"]
                       and "remove-output" not in c["metadata"].get("tags", [])]
        if shown and result["outputCells"] == 0:
            problems.append(f"{path}: {len(shown)} code cells but no outputs on the page")
        elif result["outputCells"] < len(with_output):
            problems.append(f"{path}: {result['outputCells']} cells show outputs, but {len(with_output)} "
                            "cells of the notebook have stored outputs")
        expected_errors = any("raises-exception" in c["metadata"].get("tags", []) for c in code)
        if result["errorOutputs"] and not expected_errors:
            problems.append(f"{path}: {result['errorOutputs']} cells show a traceback")
    assert not problems, "\n".join(problems)


def test_colab_buttons_open_the_pages_own_notebook(crawl):
    config = yaml.safe_load((BOOK / "_config.yml").read_text())
    repository = config["repository"]
    owner_repo = urlsplit(repository["url"]).path.strip("/").removesuffix(".git")
    colab = config["launch_buttons"]["colab_url"].rstrip("/")
    prefix = repository.get("path_to_book", "").strip("/")
    notebooks = notebook_pages()
    problems = []
    for path, result in crawl["pages"].items():
        if path in notebooks:
            notebook = "/".join(filter(None, [prefix, path.removesuffix(".html") + ".ipynb"]))
            expected = f"{colab}/github/{owner_repo}/blob/{repository.get('branch', 'main')}/{notebook}"
            if set(result["colab"]) != {expected}:
                problems.append(f"{path}: Colab links {sorted(set(result['colab']))}, expected {expected}")
        elif result["colab"]:
            problems.append(f"{path}: a page without a notebook links to Colab: {result['colab']}")
    assert not problems, "\n".join(problems)


# The interactive head views (mhsa.course.plotting.head_view): what the heatmap shows, as the page draws it.
DRAWN = """
(view) => {
  const plot = view.querySelector(".mhsa-head-view-plot");
  const image = plot.querySelector("g.hm image");  // plotly draws a heatmap as one bitmap
  return {image: image ? image.getAttribute("href") : null, title: plot.layout.title.text,
          bars: JSON.stringify(plot.data[1].y), status: view.querySelector("[data-role=status]").textContent};
}
"""


def head_view_pages():
    return sorted(p.relative_to(HTML).as_posix() for p in HTML.rglob("*.html")
                  if 'class="mhsa-head-view"' in p.read_text(errors="replace"))


def pick_other_option(view, role):
    """Select an option of the view's ``role`` menu other than the current one."""
    menu = view.locator(f"select[data-role={role}]")
    values = menu.locator("option").evaluate_all("(options) => options.map((o) => o.value)")
    current = menu.input_value()
    menu.select_option(next(v for v in values if v != current))


def test_head_views_draw_offline_and_follow_their_menus_and_the_pointer():
    chromium = chromium_executable()
    if chromium is None:
        skip_or_fail("Chromium not found: install Debian's `chromium` package or set MHSA_CHROMIUM")
    try:
        from playwright import sync_api
    except ImportError:
        skip_or_fail("the browser check needs the `playwright` package (requirements.txt)")
    ensure_built()
    pages = head_view_pages()
    assert pages, "no page of the book shows a head view (mhsa.course.plotting.head_view)"
    server = http.server.ThreadingHTTPServer(
        ("127.0.0.1", 0), functools.partial(QuietHandler, directory=str(HTML)))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    base = f"http://127.0.0.1:{server.server_address[1]}/"
    blocked, problems = [], []

    def local_only(route_, request):  # every request that leaves the book fails
        if request.url.startswith((base, "data:")):
            return route_.continue_()
        blocked.append(request.url)
        return route_.abort()

    try:
        with sync_api.sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path=chromium, args=CHROMIUM_FLAGS)
            context = browser.new_context(viewport={"width": 1280, "height": 900})
            context.route("**/*", local_only)
            page = context.new_page()
            for path in pages:
                errors = []
                page.on("pageerror", lambda e, errors=errors: errors.append(str(e)[:200]))
                page.goto(base + path, wait_until="load")
                views = page.locator(".mhsa-head-view")
                for k in range(views.count()):
                    view = views.nth(k)
                    name = f"{path}, head view {k}"
                    try:
                        view.locator("xpath=self::*[@data-ready='true']").wait_for(timeout=30000)
                    except sync_api.TimeoutError:
                        problems.append(f"{name}: not drawn: {view.inner_text()[:200]!r}")
                        continue
                    view.scroll_into_view_if_needed()
                    first = view.evaluate(DRAWN)
                    if not first["image"]:
                        problems.append(f"{name}: no heatmap drawn")
                        continue
                    pick_other_option(view, "head")
                    after_head = view.evaluate(DRAWN)
                    pick_other_option(view, "layer")
                    after_layer = view.evaluate(DRAWN)
                    if after_head["image"] == first["image"] or after_head["title"] == first["title"]:
                        problems.append(f"{name}: picking another head changed nothing drawn")
                    if after_layer["image"] == after_head["image"]:
                        problems.append(f"{name}: picking another layer changed nothing drawn")
                    # the pointer over the last row selects that query: the bar chart shows its row
                    grid = view.locator(".nsewdrag").first.bounding_box()
                    page.mouse.move(grid["x"] + grid["width"] / 2, grid["y"] + grid["height"] - 3)
                    page.wait_for_timeout(300)
                    hovered = view.evaluate(DRAWN)
                    if hovered["bars"] == after_layer["bars"] or hovered["status"] == after_layer["status"]:
                        problems.append(f"{name}: hovering over the last row showed nothing new")
                    # a click holds its row: moving the pointer over other rows then changes nothing
                    page.mouse.click(grid["x"] + grid["width"] / 2, grid["y"] + 3)
                    page.wait_for_timeout(300)
                    held = view.evaluate(DRAWN)
                    page.mouse.move(grid["x"] + grid["width"] / 2, grid["y"] + grid["height"] - 3)
                    page.wait_for_timeout(300)
                    if held["bars"] == hovered["bars"]:
                        problems.append(f"{name}: clicking the first row showed nothing new")
                    if view.evaluate(DRAWN)["bars"] != held["bars"]:
                        problems.append(f"{name}: the clicked row did not hold while the pointer moved")
                problems += [f"{path}: JavaScript error: {e}" for e in errors
                             if not KNOWN_JS_ERRORS.search(e)]
                SCREENSHOTS.mkdir(parents=True, exist_ok=True)
                views.first.screenshot(path=str(SCREENSHOTS / f"{Path(path).stem}-head-view.png"))
            browser.close()
    finally:
        server.shutdown()
        server.server_close()
    problems += [f"blocked request the view needed: {url}" for url in blocked if "plotly" in url]
    assert not problems, "\n".join(problems)


def test_mathjax_is_served_by_the_book():
    """Every page with math loads MathJax from the book's own files, never from a CDN (no browser needed)."""
    ensure_built()
    script = re.compile(r'<script\b[^>]*\bsrc="([^"]*mathjax[^"]*)"', re.IGNORECASE)
    problems, pages_with_math = [], 0
    for page in sorted(HTML.rglob("*.html")):
        text = page.read_text(errors="replace")
        sources = script.findall(text)
        if 'class="math' in text:
            pages_with_math += 1
            if not sources:
                problems.append(f"{page.relative_to(HTML)}: math but no MathJax script")
        for src in sources:
            if src.startswith(("http:", "https:", "//")):
                problems.append(f"{page.relative_to(HTML)}: MathJax from outside the book: {src}")
            elif not (page.parent / src.split("?")[0]).resolve().is_file():
                problems.append(f"{page.relative_to(HTML)}: {src} is not in the build")
    assert pages_with_math > 0, "no page of the book has math: is this the built book?"
    assert not problems, "\n".join(problems)


PHONE = {"width": 390, "height": 844}  # the narrowest screen the pages are laid out for
# Runs in a page opened PHONE wide: what makes the page wider than the screen, and what is cut off.
TOO_WIDE = r"""
() => {
  const screen = document.documentElement.clientWidth;
  const scrolls = (e) => { for (let p = e; p; p = p.parentElement) {
    const o = getComputedStyle(p).overflowX;
    if ((o === "auto" || o === "scroll") && p.scrollWidth > p.clientWidth) return true; } return false; };
  const describe = (e) => `${e.tagName.toLowerCase()}.${e.className}`.slice(0, 40) + ": "
    + (e.textContent || "").trim().replace(/\s+/g, " ").slice(0, 60);
  const wide = [], cut = [];
  for (const e of document.querySelectorAll("main *")) {
    const r = e.getBoundingClientRect();
    if (r.width === 0 || getComputedStyle(e).visibility === "hidden") continue;
    const parent = e.parentElement.getBoundingClientRect();
    if (r.right > screen + 1 && parent.right <= screen + 1 && !scrolls(e)) wide.push(describe(e));
  }
  for (const e of document.querySelectorAll("main table, main .math, main mjx-container")) {
    const o = getComputedStyle(e).overflowX;
    if ((o === "hidden" || o === "clip") && e.scrollWidth > e.clientWidth + 8) cut.push(describe(e));
  }
  return {width: document.documentElement.scrollWidth, screen, wide, cut};
}
"""


def test_pages_fit_a_phone_screen():
    """At 390 px, wide tables, formulas and code scroll in their own box or wrap: the page itself never
    gets wider than the screen, and nothing is cut off."""
    chromium = chromium_executable()
    if chromium is None:
        skip_or_fail("Chromium not found: install Debian's `chromium` package or set MHSA_CHROMIUM")
    try:
        from playwright import sync_api
    except ImportError:
        skip_or_fail("the browser check needs the `playwright` package (requirements.txt)")
    ensure_built()
    server = http.server.ThreadingHTTPServer(
        ("127.0.0.1", 0), functools.partial(QuietHandler, directory=str(HTML)))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    base = f"http://127.0.0.1:{server.server_address[1]}/"
    pages = sorted(p.relative_to(HTML).as_posix() for p in (HTML / "chapters").glob("*.html"))
    problems = []
    try:
        with sync_api.sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path=chromium, args=CHROMIUM_FLAGS)
            context = browser.new_context(viewport=PHONE)
            context.route("**/*", functools.partial(route, base))
            page = context.new_page()
            for path in pages:
                page.goto(base + path, wait_until="load")
                page.evaluate("() => window.MathJax && MathJax.startup ? MathJax.startup.promise : null")
                found = page.evaluate(TOO_WIDE)
                if found["width"] > found["screen"]:
                    problems.append(f"{path}: the page is {found['width']} px wide on a "
                                    f"{found['screen']} px screen: " + "; ".join(found["wide"][:5]))
                problems += [f"{path}: cut off: {e}" for e in found["cut"]]
            SCREENSHOTS.mkdir(parents=True, exist_ok=True)
            page.goto(base + "chapters/05_encoder_layer.html", wait_until="load")
            page.evaluate("() => window.MathJax && MathJax.startup ? MathJax.startup.promise : null")
            page.screenshot(path=str(SCREENSHOTS / "phone-05_encoder_layer.png"))
            browser.close()
    finally:
        server.shutdown()
        server.server_close()
    assert not problems, "\n".join(problems)
