"""Render every page of the built documentation in headless Chromium and fail on problems.

``make docs-check`` builds the site (``mkdocs build --strict``) and runs this script on it::

    python docs/check_site.py site            # check every page of ./site
    python docs/check_site.py --self-test     # prove the checks catch a broken page

The site is served on 127.0.0.1 (a random port) and each page is loaded in the system's
Chromium (``/usr/bin/chromium``, Debian package ``chromium``; ``$CHROMIUM`` to choose another),
driven over the Chrome DevTools protocol. A page fails when, while it loads:

* JavaScript throws, or logs with ``console.error``/``console.assert``, or the browser logs
  an error (a resource that failed, a blocked script...);
* any request answers 400 or more, or fails (a missing asset);
* any request leaves 127.0.0.1 (a CDN: the site must work offline);
* a docstring's reST role is shown literally (``:class:`X```), an image does not load,
  or a code block is not highlighted (``pre`` outside a
  ``.highlight`` block), or the highlighting colours are not applied (the bundled Pygments
  stylesheet missing).

No browser is downloaded: without Chromium the script says how to install it and exits 2.
The browser runs with a fresh profile, no sandbox (root in CI), no GPU, no background
networking and a host resolver that knows only 127.0.0.1, and is stopped at the end with the
process group it leads (its helpers); its profile directory is then removed.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import functools
import http.server
import itertools
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import aiohttp

CHROMIUM_FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--no-default-browser-check",
    "--disable-extensions",
    # Never resolve (or contact) any host but 127.0.0.1: a CDN request fails here at once.
    "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 127.0.0.1",
    "--remote-debugging-address=127.0.0.1",
    "--remote-debugging-port=0",
)
#: How long to retry removing the browser's profile directory (seconds).
PROFILE_REMOVE_S = 10.0
#: Bounds (seconds): the browser's start, one page's load, the quiet period after it.
BROWSER_START_S = 60.0
PAGE_LOAD_S = 30.0
SETTLE_S = 0.5

#: Run in each page after it loaded: what the DOM says about images and code highlighting.
_PAGE_PROBE = """(() => {
  const brokenImages = [...document.images]
    .filter(img => !img.complete || img.naturalWidth === 0)
    .map(img => img.currentSrc || img.src);
  const pres = [...document.querySelectorAll("pre")];
  const unhighlighted = pres.filter(pre => !pre.closest(".highlight")).length;
  const keyword = document.querySelector(".highlight .k, .highlight .kn, .highlight .nb");
  let keywordColoured = null;
  if (keyword) {
    const pre = keyword.closest("pre");
    keywordColoured = getComputedStyle(keyword).color !== getComputedStyle(pre).color;
  }
  const roles = document.body.innerText.match(/:(class|meth|func|attr|exc|mod|data):`/g) || [];
  return {brokenImages, codeBlocks: pres.length, unhighlighted, keywordColoured,
          title: document.title, textLength: document.body.innerText.length,
          reSTRoles: roles.length};
})()"""


@dataclass
class PageReport:
    """What went wrong on one page (empty lists: nothing)."""

    url: str
    problems: list[str] = field(default_factory=list)
    requests: int = 0
    code_blocks: int = 0
    keyword_coloured: bool | None = None


# --- serving the site ------------------------------------------------------------------------


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        pass


@contextlib.contextmanager
def serve(root: Path) -> Iterator[str]:
    """Serve ``root`` on 127.0.0.1 (a free port) in a thread; yields the base URL."""
    handler = functools.partial(_QuietHandler, directory=str(root))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, name="site-server", daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/"
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


# --- the browser -------------------------------------------------------------------------------


def find_chromium() -> str | None:
    """``$CHROMIUM``, else chromium / chromium-browser / google-chrome on PATH."""
    explicit = os.environ.get("CHROMIUM", "").strip()
    if explicit:
        return explicit if shutil.which(explicit) else None
    for name in ("chromium", "chromium-browser", "google-chrome"):
        found = shutil.which(name)
        if found:
            return found
    return None


@contextlib.contextmanager
def launch(executable: str) -> Iterator[str]:
    """Start headless Chromium with a fresh profile; yields its browser websocket URL."""
    profile = tempfile.mkdtemp(prefix="aiokprod-docs-chromium-")
    try:
        command = [executable, *CHROMIUM_FLAGS, f"--user-data-dir={profile}", "about:blank"]
        # Its own process group: Chromium's helpers (renderer, zygote, crash handler) are ours
        # to stop too, and one still writing into the profile made its removal fail in CI.
        process = subprocess.Popen(
            command,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            start_new_session=True,
        )
        try:
            yield _wait_devtools(process, Path(profile) / "DevToolsActivePort")
        finally:
            _stop_group(process)
    finally:
        _remove_profile(Path(profile))


def _stop_group(process: subprocess.Popen[bytes]) -> None:
    """Stop the browser, then whatever is left of the process group it leads."""
    process.terminate()
    try:
        process.wait(timeout=15)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
    if process.stderr is not None:
        process.stderr.close()
    # The group's id is the browser's PID (start_new_session); only its helpers remain in it.
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(process.pid, signal.SIGKILL)


def _remove_profile(profile: Path) -> None:
    """Remove the profile; a helper that has not exited yet may still write into it."""
    deadline = time.monotonic() + PROFILE_REMOVE_S
    while True:
        try:
            shutil.rmtree(profile)
            return
        except FileNotFoundError:
            return
        except OSError as exc:
            if time.monotonic() >= deadline:
                # A left temporary directory is not a problem of the site: say so, go on.
                print(f"note: could not remove {profile}: {exc}", file=sys.stderr)
                return
            time.sleep(0.2)


def _wait_devtools(process: subprocess.Popen[bytes], port_file: Path) -> str:
    # With --remote-debugging-port=0 Chromium picks a port and writes "PORT\n/devtools/..."
    deadline = time.monotonic() + BROWSER_START_S
    while time.monotonic() < deadline:
        if process.poll() is not None:
            err = process.stderr.read().decode(errors="replace") if process.stderr else ""
            raise RuntimeError(f"chromium exited with code {process.returncode}: {err[-2000:]}")
        with contextlib.suppress(FileNotFoundError, ValueError):
            lines = port_file.read_text().splitlines()
            if len(lines) >= 2:
                return f"ws://127.0.0.1:{int(lines[0])}{lines[1]}"
        time.sleep(0.1)
    raise RuntimeError(f"chromium did not open its DevTools port in {BROWSER_START_S:.0f} s")


class DevTools:
    """A minimal Chrome DevTools protocol client over one browser websocket (flat sessions)."""

    def __init__(self, ws: aiohttp.ClientWebSocketResponse) -> None:
        self._ws = ws
        self._ids = itertools.count(1)
        self._pending: dict[int, asyncio.Future[dict[str, Any]]] = {}
        self.events: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
        self._reader = asyncio.create_task(self._read())

    async def call(
        self, method: str, params: dict[str, Any] | None = None, session: str | None = None
    ) -> dict[str, Any]:
        """Send one command and wait for its result (raises on a protocol error)."""
        message_id = next(self._ids)
        message: dict[str, Any] = {"id": message_id, "method": method, "params": params or {}}
        if session is not None:
            message["sessionId"] = session
        future = asyncio.get_running_loop().create_future()
        self._pending[message_id] = future
        await self._ws.send_str(json.dumps(message))
        return await asyncio.wait_for(future, PAGE_LOAD_S)

    async def _read(self) -> None:
        async for raw in self._ws:
            if raw.type is not aiohttp.WSMsgType.TEXT:
                continue
            message = json.loads(raw.data)
            future = self._pending.pop(message.get("id", -1), None)
            if future is None:
                self.events.put_nowait(message)
            elif "error" in message:
                future.set_exception(RuntimeError(f"DevTools error: {message['error']}"))
            else:
                future.set_result(message.get("result", {}))

    async def close(self) -> None:
        """Stop reading (the websocket is closed by its owner)."""
        self._reader.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._reader


@contextlib.asynccontextmanager
async def devtools(browser_ws: str) -> AsyncIterator[DevTools]:
    """A DevTools client connected to the browser."""
    async with (
        aiohttp.ClientSession() as http,
        http.ws_connect(browser_ws, max_msg_size=0) as ws,
    ):
        client = DevTools(ws)
        try:
            yield client
        finally:
            await client.close()


# --- checking pages ----------------------------------------------------------------------------


async def open_page(client: DevTools) -> str:
    """A fresh tab with Page, Runtime, Log and Network events on; returns its session id."""
    target = await client.call("Target.createTarget", {"url": "about:blank"})
    attached = await client.call(
        "Target.attachToTarget", {"targetId": target["targetId"], "flatten": True}
    )
    session: str = attached["sessionId"]
    for domain in ("Page", "Runtime", "Log", "Network"):
        await client.call(f"{domain}.enable", session=session)
    return session


async def check_page(client: DevTools, session: str, url: str, origin: str) -> PageReport:
    """Load ``url`` in the tab and report every problem seen until the page is quiet."""
    report = PageReport(url)
    while not client.events.empty():  # leftovers of the previous page
        client.events.get_nowait()
    await client.call("Page.navigate", {"url": url}, session=session)
    loaded = False
    in_flight: dict[str, str] = {}  # request id -> URL
    deadline = time.monotonic() + PAGE_LOAD_S
    quiet_since: float | None = None
    while True:
        now = time.monotonic()
        if now >= deadline:
            report.problems.append(f"did not finish loading in {PAGE_LOAD_S:.0f} s")
            break
        if loaded and not in_flight:
            quiet_since = quiet_since or now
            if now - quiet_since >= SETTLE_S:
                break
        else:
            quiet_since = None
        try:
            event = await asyncio.wait_for(client.events.get(), timeout=0.1)
        except TimeoutError:
            continue
        if event.get("sessionId") != session:
            continue
        loaded |= event["method"] == "Page.loadEventFired"
        _note_event(event, report, in_flight, origin)
    probe = await client.call(
        "Runtime.evaluate", {"expression": _PAGE_PROBE, "returnByValue": True}, session=session
    )
    _note_probe(probe["result"].get("value") or {}, report)
    return report


def _note_event(
    event: dict[str, Any], report: PageReport, in_flight: dict[str, str], origin: str
) -> None:
    method = event["method"]
    params = event.get("params", {})
    if method == "Network.requestWillBeSent":
        request_url = params["request"]["url"]
        report.requests += 1
        # A worker's requests (the search index) finish in the worker's own target: only the
        # page's requests are awaited; the worker's failures still reach Log.entryAdded.
        if params.get("loaderId"):
            in_flight[params["requestId"]] = request_url
        if urlsplit(request_url).scheme in ("http", "https", "ws", "wss") and not (
            request_url.startswith(origin)
        ):
            report.problems.append(f"request leaves the site (a CDN?): {request_url}")
    elif method == "Network.responseReceived":
        response = params["response"]
        if response["status"] >= 400:
            report.problems.append(f"HTTP {response['status']}: {response['url']}")
    elif method == "Network.loadingFinished":
        in_flight.pop(params["requestId"], None)
    elif method == "Network.loadingFailed":
        failed_url = in_flight.pop(params["requestId"], params["requestId"])
        report.problems.append(f"request failed ({params.get('errorText')}): {failed_url}")
    elif method == "Runtime.exceptionThrown":
        details = params["exceptionDetails"]
        text = details.get("exception", {}).get("description") or details.get("text")
        report.problems.append(f"JavaScript exception: {text}")
    elif method == "Runtime.consoleAPICalled" and params["type"] in ("error", "assert"):
        args = " ".join(str(a.get("value", a.get("description", ""))) for a in params["args"])
        report.problems.append(f"console.{params['type']}: {args}")
    elif method == "Log.entryAdded" and params["entry"]["level"] == "error":
        entry = params["entry"]
        report.problems.append(f"browser error: {entry['text']} {entry.get('url', '')}".strip())


def _note_probe(probe: dict[str, Any], report: PageReport) -> None:
    for src in probe.get("brokenImages", []):
        report.problems.append(f"image did not load: {src}")
    if probe.get("unhighlighted"):
        report.problems.append(f"{probe['unhighlighted']} code block(s) not highlighted")
    if probe.get("reSTRoles"):
        report.problems.append(f"{probe['reSTRoles']} reST role(s) shown literally (:class:`...`)")
    if probe.get("textLength", 0) == 0:
        report.problems.append("the page shows no text")
    report.code_blocks = probe.get("codeBlocks", 0)
    report.keyword_coloured = probe.get("keywordColoured")


def site_pages(root: Path) -> list[str]:
    """Every page of the site, as paths relative to ``root`` (``404.html`` included)."""
    pages = sorted(p.relative_to(root).as_posix() for p in root.rglob("*.html"))
    return [p for p in pages if not p.startswith(("search/", "assets/"))]


async def check_site(root: Path, executable: str) -> list[PageReport]:
    """Load every page of ``root`` in Chromium; one report per page."""
    pages = site_pages(root)
    if not pages:
        raise RuntimeError(f"no HTML pages under {root}: build the site first (make docs)")
    reports = []
    with serve(root) as origin, launch(executable) as browser_ws:
        async with devtools(browser_ws) as client:
            session = await open_page(client)
            for page in pages:
                reports.append(await check_page(client, session, origin + page, origin))
    return reports


def summarise(reports: list[PageReport], *, require_colour: bool = True) -> list[str]:
    """The problems of every page, plus the site-wide one (highlighting colours not applied)."""
    lines = [f"{r.url}: {problem}" for r in reports for problem in r.problems]
    coloured = [r.keyword_coloured for r in reports if r.keyword_coloured is not None]
    if require_colour and (not coloured or not any(coloured)):
        lines.append("no highlighted keyword has its own colour: is css/pygments.css missing?")
    return lines


# --- self-test ---------------------------------------------------------------------------------

_BROKEN_PAGE = """<!doctype html><html><head><title>broken</title>
<link rel="stylesheet" href="missing.css"></head><body><p>broken page</p>
<img src="missing.png" alt="missing"><p>see :class:`Producer`</p>
<pre><code>plain, not highlighted</code></pre>
<script>console.error("boom from console"); throw new Error("boom from a script");</script>
</body></html>"""
_GOOD_PAGE = """<!doctype html><html><head><title>good</title>
<style>.highlight .k { color: #007020 }</style></head><body><p>good page</p>
<div class="highlight"><pre><span class="k">import</span> asyncio</pre></div></body></html>"""


async def self_test(executable: str) -> list[str]:
    """Check a page with known faults and a clean one; returns what the checks got wrong."""
    with tempfile.TemporaryDirectory(prefix="aiokprod-docs-selftest-") as folder:
        root = Path(folder)
        (root / "broken.html").write_text(_BROKEN_PAGE)
        (root / "good.html").write_text(_GOOD_PAGE)
        reports = {Path(urlsplit(r.url).path).name: r for r in await check_site(root, executable)}
    found = "\n".join(reports["broken.html"].problems)
    wrong = [
        f"broken.html: the check missed {what!r}"
        for what in (
            "HTTP 404",
            "missing.css",
            "missing.png",
            "image did not load",
            "boom from console",
            "boom from a script",
            "not highlighted",
            "reST role",
        )
        if what not in found
    ]
    wrong += [f"good.html: unexpected {p!r}" for p in reports["good.html"].problems]
    if reports["good.html"].keyword_coloured is not True:
        wrong.append("good.html: the highlighted keyword's colour was not seen")
    return wrong


def main(argv: list[str] | None = None) -> int:
    """Entry point: 0 all pages clean, 1 problems found, 2 no Chromium or no site."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("site", nargs="?", default="site", help="the built site (default: site)")
    parser.add_argument(
        "--self-test", action="store_true", help="check known-broken pages instead of the site"
    )
    args = parser.parse_args(argv)
    executable = find_chromium()
    if executable is None:
        print(
            "docs-check: no Chromium found. On Debian/Ubuntu: apt-get install -y chromium "
            "(or set CHROMIUM=/path/to/chrome). No browser is downloaded.",
            file=sys.stderr,
        )
        return 2
    began = time.monotonic()
    if args.self_test:
        wrong = asyncio.run(self_test(executable))
        for line in wrong:
            print(f"docs-check self-test: {line}", file=sys.stderr)
        print(f"docs-check self-test: {'FAILED' if wrong else 'ok'}", file=sys.stderr)
        return 1 if wrong else 0
    root = Path(args.site)
    if not (root / "index.html").is_file():
        print(f"docs-check: {root}/index.html not found: build the site first", file=sys.stderr)
        return 2
    reports = asyncio.run(check_site(root, executable))
    problems = summarise(reports)
    for line in problems:
        print(f"docs-check: {line}", file=sys.stderr)
    requests = sum(r.requests for r in reports)
    blocks = sum(r.code_blocks for r in reports)
    print(
        f"docs-check: {len(reports)} pages, {requests} requests, {blocks} code blocks in "
        f"{time.monotonic() - began:.1f} s: "
        f"{f'{len(problems)} problem(s)' if problems else 'no console errors, no missing assets'}",
        file=sys.stderr,
    )
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
