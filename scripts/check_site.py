"""Check the built docs site in a real headless browser, as a reader would see it.

    python scripts/check_site.py                       # build the site, check it
    python scripts/check_site.py --site /tmp/site      # check a site already built
    python scripts/check_site.py --screenshots DIR     # also write screenshots of key pages

It serves the site on 127.0.0.1 (an ephemeral port) and opens every page in Debian's
Chromium (/usr/bin/chromium) through Playwright, at a phone's width and a laptop's. A page
fails when it does not load, logs a console error, asks another host for anything, links to
a page, anchor or image of the site that is not there, is wider than the window, has a table
with an empty header, or lets a code line run under its copy button; the diagrams and the
charts must be drawn. Exit status 1 lists every problem.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import http.server
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import site_requirements

ROOT = Path(__file__).resolve().parent.parent
CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
WIDTHS = (390, 1366)
HEIGHT = 900
# name -> page (relative to the site's root): what the screenshots show
SHOTS = {
    "home": "",
    "error-kinds": "errors/",
    "error-kind-timeout": "errors/timeout/",
    "concepts": "concepts/",
    "performance": "performance/",
}
DIAGRAM_PAGE = "concepts/"
DIAGRAM_TEXT = ("deno worker", "seccomp", "Landlock", "supervisor")
CHART_PAGE = "performance/"
CHARTS = ("ratios.svg", "latency.svg")
PAGE_TIMEOUT_MS = 30_000


@dataclass
class Report:
    """What the browser saw. Every list or dict is empty on a site with nothing wrong."""

    base: str = ""
    pages: list[str] = field(default_factory=list)
    bad_status: dict[str, int] = field(default_factory=dict)
    console_errors: dict[str, list[str]] = field(default_factory=dict)
    external_requests: dict[str, list[str]] = field(default_factory=dict)
    broken_links: list[str] = field(default_factory=list)
    broken_images: list[str] = field(default_factory=list)
    overflow: dict[str, list[str]] = field(default_factory=dict)  # "390: page" -> widest elements
    empty_table_headers: dict[str, int] = field(default_factory=dict)
    copy_button_overlaps: dict[str, list[str]] = field(default_factory=dict)
    diagrams: list[dict[str, Any]] = field(default_factory=list)
    charts: dict[str, dict[str, Any]] = field(default_factory=dict)
    screenshots: list[str] = field(default_factory=list)
    seconds: float = 0.0

    def problems(self) -> list[str]:
        found = [f"{page}: HTTP {status}" for page, status in self.bad_status.items()]
        found += [f"{page}: console error: {text}" for page, texts in self.console_errors.items() for text in texts]
        found += [
            f"{page}: asked another host for {url}" for page, urls in self.external_requests.items() for url in urls
        ]
        found += [f"broken link {text}" for text in self.broken_links]
        found += [f"broken image {text}" for text in self.broken_images]
        found += [f"{key}: wider than the window ({', '.join(what)})" for key, what in self.overflow.items()]
        found += [f"{page}: {n} table(s) with an empty header" for page, n in self.empty_table_headers.items()]
        found += [
            f"{key}: a code line runs under the copy button: {line!r}"
            for key, lines in self.copy_button_overlaps.items()
            for line in lines
        ]
        if not self.diagrams:
            found.append(f"{DIAGRAM_PAGE}: no diagram found")
        for diagram in self.diagrams:
            if not diagram["svg"]:
                found.append(f"{diagram['page']}: a diagram was not rendered as SVG")
            missing = [text for text in DIAGRAM_TEXT if text not in diagram["text"]]
            if diagram["page"] == DIAGRAM_PAGE and missing:
                found.append(f"{diagram['page']}: the diagram lacks {missing}")
        for name in CHARTS:
            chart = self.charts.get(name) or {}
            if not chart.get("loaded"):
                found.append(f"{CHART_PAGE}: chart {name} is missing or did not load")
            elif not chart.get("alt"):
                found.append(f"{CHART_PAGE}: chart {name} has no alt text")
        return found


def build(site: Path) -> None:
    """``mkdocs build --strict`` into ``site``."""
    done = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(site)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
        timeout=300,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
    )
    if done.returncode != 0:
        raise RuntimeError(f"mkdocs build failed:\n{done.stdout}{done.stderr}")


class _Handler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base class's name
        pass


class _Server(http.server.ThreadingHTTPServer):
    # Request threads are joined at close, so nothing is left running after the check.
    daemon_threads = False

    def handle_error(self, request: Any, client_address: Any) -> None:
        # The browser drops a connection when it leaves a page mid-download; not the site's fault.
        if not isinstance(sys.exc_info()[1], ConnectionError):
            super().handle_error(request, client_address)


@contextlib.contextmanager
def serve(site: Path) -> Iterator[str]:
    """The site over HTTP on 127.0.0.1, an ephemeral port, from a thread; yields its base URL."""
    server = _Server(("127.0.0.1", 0), functools.partial(_Handler, directory=str(site)))
    thread = threading.Thread(target=server.serve_forever, name="docs-site-server", daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/"
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


def pages(site: Path) -> list[str]:
    """Every HTML page of the site, as URL paths relative to its root."""
    found = []
    for path in sorted(site.rglob("*.html")):
        relative = path.relative_to(site).as_posix()
        found.append(relative[: -len("index.html")] if path.name == "index.html" else relative)
    return found


def _status(url: str) -> int:
    try:
        with urllib.request.urlopen(url, timeout=10) as answer:
            return int(answer.status)
    except urllib.error.HTTPError as exc:
        return exc.code


_COLLECT = """() => {
  const urls = (selector, attr) => [...document.querySelectorAll(selector)].map(e => e[attr]).filter(Boolean);
  return {
    links: urls('a[href]', 'href'),
    resources: [
      ...urls('img[src]', 'src'), ...urls('object[data]', 'data'),
      ...[...document.querySelectorAll('source[srcset]')]
        .map(e => new URL(e.getAttribute('srcset'), location.href).href),
      ...urls('link[rel=stylesheet][href]', 'href'), ...urls('script[src]', 'src'),
    ],
    images: [...document.querySelectorAll('img')]
      .map(i => ({src: i.src, ok: i.complete && i.naturalWidth > 0, alt: i.alt})),
    ids: [...document.querySelectorAll('[id]')].map(e => e.id),
    emptyHeaders: [...document.querySelectorAll('.md-content table thead tr')]
      .filter(tr => [...tr.children].every(c => c.textContent.trim() === '')).length,
  };
}"""

_OVERFLOW = """() => {
  const root = document.documentElement;
  if (root.scrollWidth <= root.clientWidth) return [];
  const wide = [...document.querySelectorAll('body *')]
    .filter(e => e.getBoundingClientRect().right > root.clientWidth + 1)
    .map(e => {
      const name = typeof e.className === 'string' && e.className ? '.' + e.className.split(' ')[0] : '';
      return e.tagName.toLowerCase() + name + ' ' + Math.round(e.getBoundingClientRect().right) + 'px';
    });
  return [`${root.scrollWidth}px > ${root.clientWidth}px`, ...wide.slice(-5)];
}"""

# A code line whose text shows beside or through the copy button: at the block's start
# (through a button that lets text show, or in a gap between an opaque one and the block's
# edge), and with the block scrolled to its end (under the button, whatever it is).
_COPY_OVERLAP = """() => {
  const under = (code, nav, from, to) => {
    const box = code.getBoundingClientRect(), b = nav.getBoundingClientRect();
    const [x0, x1] = [from(b, box), to(b, box)];
    if (x1 - x0 < 0.5) return false;
    const range = document.createRange();
    range.selectNodeContents(code);
    for (const r of range.getClientRects()) {
      const left = Math.max(r.left, box.left), right = Math.min(r.right, box.right);
      if (r.width === 0 || right <= left) continue;
      if (r.top < b.bottom && r.bottom > b.top && right > x0 + 0.5 && left < x1) return true;
    }
    return false;
  };
  const navLeft = (b) => b.left, navRight = (b) => b.right, edge = (b, box) => box.right;
  const bad = [];
  for (const pre of document.querySelectorAll('.md-content pre')) {
    const nav = pre.querySelector(':scope > .md-code__nav, :scope > .md-clipboard');
    const code = pre.querySelector(':scope > code');
    if (!nav || !code || code.offsetParent === null) continue;
    const opaque = /^rgb\\(/.test(getComputedStyle(nav).backgroundColor);
    const before = code.scrollLeft;
    let hit = opaque ? under(code, nav, navRight, edge) : under(code, nav, navLeft, edge);
    code.scrollLeft = code.scrollWidth;
    hit = hit || under(code, nav, navLeft, navRight);
    code.scrollLeft = before;
    if (hit) bad.push(code.textContent.split('\\n')[0].slice(0, 80));
  }
  return bad;
}"""


def _shadow_diagrams(page: Any, name: str) -> list[dict[str, Any]]:
    """Each Mermaid diagram of the page: whether it holds an SVG, and its text.

    Material draws a diagram inside a closed shadow root, which page scripts cannot enter;
    the DevTools protocol's DOM, pierced, can.
    """
    session = page.context.new_cdp_session(page)
    try:
        tree = session.send("DOM.getDocument", {"depth": -1, "pierce": True})
    finally:
        session.detach()
    diagrams: list[dict[str, Any]] = []

    def texts(node: dict[str, Any]) -> Iterator[str]:
        if node.get("nodeName", "").lower() == "style":
            return
        if node.get("nodeType") == 3:
            yield node.get("nodeValue", "")
        for child in [*node.get("children", []), *node.get("shadowRoots", [])]:
            yield from texts(child)

    def has_svg(node: dict[str, Any]) -> bool:
        return node.get("nodeName", "").lower() == "svg" or any(
            has_svg(child) for child in [*node.get("children", []), *node.get("shadowRoots", [])]
        )

    def walk(node: dict[str, Any]) -> None:
        attributes = node.get("attributes", [])
        classes = dict(zip(attributes[::2], attributes[1::2], strict=False)).get("class", "").split()
        if node.get("nodeName") in ("DIV", "PRE") and "mermaid" in classes:
            roots = node.get("shadowRoots", [])
            diagrams.append(
                {
                    "page": name,
                    "svg": any(has_svg(root) for root in roots),
                    "text": " ".join(" ".join(t for root in roots for t in texts(root)).split()),
                }
            )
            return
        for child in [*node.get("children", []), *node.get("shadowRoots", [])]:
            walk(child)

    walk(tree["root"])
    return diagrams


def _open(page: Any, url: str, wait_diagrams: bool) -> int:
    response = page.goto(url, wait_until="load", timeout=PAGE_TIMEOUT_MS)
    if wait_diagrams:
        # Material swaps each <pre class="mermaid"> for the drawn diagram once mermaid has run.
        with contextlib.suppress(Exception):
            page.wait_for_function("() => !document.querySelector('pre.mermaid')", timeout=PAGE_TIMEOUT_MS, polling=100)
    return 0 if response is None else int(response.status)


def check(site: Path, screenshots: Path | None = None) -> Report:
    """Open every page of a built site in Chromium and report what is wrong with it."""
    from playwright.sync_api import sync_playwright

    if not CHROMIUM.is_file():
        raise RuntimeError(f"{CHROMIUM} is missing: apt-get install chromium")
    started = time.monotonic()
    report = Report(pages=pages(site))
    if screenshots is not None:
        screenshots.mkdir(parents=True, exist_ok=True)
    with (
        serve(site) as base,
        tempfile.TemporaryDirectory(prefix="pydeno-site-check-") as profile,
        sync_playwright() as pw,
    ):
        report.base = base
        context = pw.chromium.launch_persistent_context(
            profile,
            executable_path=str(CHROMIUM),
            args=CHROMIUM_ARGS,
            headless=True,
            viewport={"width": WIDTHS[-1], "height": HEIGHT},
        )
        try:
            _visit_all(context, base, report, screenshots)
        finally:
            context.close()
    report.seconds = round(time.monotonic() - started, 1)
    return report


def _visit_all(context: Any, base: str, report: Report, screenshots: Path | None) -> None:
    current: list[str] = [""]

    def on_route(route: Any) -> None:
        url = route.request.url
        if url.startswith(base) or url.startswith("data:") or url.startswith("blob:"):
            route.continue_()
        else:
            report.external_requests.setdefault(current[0], []).append(url)
            route.abort()

    context.route("**/*", on_route)

    def on_console(message: Any) -> None:
        if message.type == "error":
            report.console_errors.setdefault(current[0], []).append(message.text)

    def on_page_error(error: Any) -> None:
        report.console_errors.setdefault(current[0], []).append(str(error))

    page = context.new_page()
    page.on("console", on_console)
    page.on("pageerror", on_page_error)

    ids: dict[str, set[str]] = {}
    links: list[tuple[str, str]] = []
    resources: set[str] = set()
    for width in sorted(WIDTHS, reverse=True):
        page.set_viewport_size({"width": width, "height": HEIGHT})
        for name in report.pages:
            current[0] = name
            full = width == WIDTHS[-1]
            status = _open(page, base + name, wait_diagrams=True)
            if status != 200:
                report.bad_status[name] = status
            key = f"{width}: /{name}"
            wide = page.evaluate(_OVERFLOW)
            if wide:
                report.overflow[key] = wide
            overlaps = page.evaluate(_COPY_OVERLAP)
            if overlaps:
                report.copy_button_overlaps[key] = overlaps
            if full:
                seen = page.evaluate(_COLLECT)
                ids[name] = set(seen["ids"])
                links += [(name, url) for url in seen["links"]]
                resources.update(seen["resources"])
                report.broken_images += [f"/{name} -> {i['src']}" for i in seen["images"] if not i["ok"]]
                if seen["emptyHeaders"]:
                    report.empty_table_headers[name] = seen["emptyHeaders"]
                if name == DIAGRAM_PAGE or page.query_selector("div.mermaid, pre.mermaid"):
                    report.diagrams += _shadow_diagrams(page, name)
                if name == CHART_PAGE:
                    for image in seen["images"]:
                        for chart in CHARTS:
                            if image["src"].endswith(f"/charts/{chart}"):
                                report.charts[chart] = {"loaded": image["ok"], "alt": image["alt"]}
            shot = next((label for label, path in SHOTS.items() if path == name), None)
            if screenshots is not None and shot is not None:
                target = screenshots / f"{shot}-{width}.png"
                page.screenshot(path=str(target), full_page=True)
                report.screenshots.append(str(target))
    page.close()
    _check_links(base, links, resources, ids, report)


def _check_links(
    base: str, links: list[tuple[str, str]], resources: set[str], ids: dict[str, set[str]], report: Report
) -> None:
    statuses: dict[str, int] = {}

    def status(url: str) -> int:
        if url not in statuses:
            statuses[url] = _status(url)
        return statuses[url]

    for url in sorted(resources):
        if url.startswith(base) and status(url.split("#")[0]) != 200:
            report.broken_links.append(f"resource {url} (HTTP {statuses[url.split('#')[0]]})")
    for page, url in links:
        if not url.startswith(base):
            continue
        target, _, fragment = url.partition("#")
        code = status(target)
        if code != 200:
            report.broken_links.append(f"/{page} -> {url} (HTTP {code})")
            continue
        path = urllib.parse.urlparse(target).path.lstrip("/")
        fragment = urllib.parse.unquote(fragment)
        if fragment and path in ids and fragment not in ids[path]:
            report.broken_links.append(f"/{page} -> {url} (no element with id {fragment!r})")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--site", type=Path, help="a built site (default: build one into a temporary directory)")
    parser.add_argument("--screenshots", type=Path, help="write PNG screenshots of the key pages here")
    parser.add_argument("--json", type=Path, help="write the whole report here as JSON")
    args = parser.parse_args(argv)
    # The build and the browser both need the docs extra: say what is missing, once, first.
    problem = site_requirements.check()
    if problem is not None:
        print(problem, file=sys.stderr)
        return 1
    with tempfile.TemporaryDirectory(prefix="pydeno-site-") as tmp:
        site = args.site
        if site is None:
            site = Path(tmp) / "site"
            build(site)
        report = check(site.resolve(), args.screenshots)
    if args.json:
        args.json.write_text(json.dumps(asdict(report), indent=2) + "\n", encoding="utf-8")
    problems = report.problems()
    for line in problems:
        print(line)
    print(
        f"{len(report.pages)} pages at widths {', '.join(map(str, WIDTHS))} in {report.seconds} s: "
        f"{len(problems)} problem(s)" + (f"; screenshots in {args.screenshots}" if args.screenshots else "")
    )
    return 1 if problems else 0


if __name__ == "__main__":
    raise SystemExit(main())
