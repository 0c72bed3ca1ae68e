"""The escape battery, places: Web Workers, node workers and data: and blob: modules the guest
starts meet the same barriers as the runtime's own isolate, under every sandbox mode."""

from __future__ import annotations

import json
from typing import Final

import pytest

from tests.security.escapes.harness import (
    ATTEMPT_MS,
    MARKER_GLOBAL,
    MODES,
    PLACE_MS,
    POST_RESULTS,
    Exposed,
    Listener,
    assert_blocked,
    assert_never_mentions,
    assert_refused_by_permissions,
    collect,
    open_runtime,
    runner,
)

# Real workers by the hundred: outside the fast subset (pytest -m "not slow").
pytestmark = pytest.mark.slow


PAYLOAD_ATTEMPTS: Final = r"""{
  "node:fs readFileSync": async () => (await import("node:fs")).readFileSync(__cfg.secretFile, "utf8"),
  "Deno.readTextFileSync": () => __deno().readTextFileSync(__cfg.secretFile),
  "fetch file:": async () => (await fetch("file://" + __cfg.secretFile)).text(),
  "import() of a .js module": async () => (await import("file://" + __cfg.moduleJs)).default,
  "static import of a .json module": async () => (await import("data:text/javascript," + encodeURIComponent(
    `import s from ${JSON.stringify("file://" + __cfg.moduleJson)} with { type: "json" }; export default s;`))).default,
  "fetch the listener": async () => `status ${(await fetch(`http://127.0.0.1:${__cfg.port}/`)).status}`,
  "WebSocket to the listener": () => __event((resolve, reject) => {
    const ws = new WebSocket(`ws://127.0.0.1:${__cfg.port}/`);
    ws.onopen = () => resolve("opened a WebSocket");
    ws.onerror = (event) => reject(__fail("WebSocketError", event.message ?? "an error event"));
    ws.onclose = (event) => reject(__fail("WebSocketClosed", `closed with code ${event.code}`));
    return () => ws.close();
  }, 1200, "the WebSocket"),
  "node:net to the listener": async () => {
    const net = await import("node:net");
    return await __event((resolve, reject) => {
      const s = net.createConnection({ host: "127.0.0.1", port: __cfg.port });
      s.on("connect", () => resolve("connected"));
      s.on("error", reject);
      return () => s.destroy();
    }, 1200, "node:net");
  },
  "Deno.connect to the listener": async () => {
    (await __deno().connect({ hostname: "127.0.0.1", port: __cfg.port })).close();
    return "connected";
  },
}"""

PLACES_PROGRAM: Final = r"""
const __post = __sources.post;
const __places = {
  "Web Worker from a data: URL": () =>
    __inWebWorker("data:text/javascript," + encodeURIComponent(__sources.webData + __post), __placeMs),
  "Web Worker from a blob: URL": () => {
    const url = URL.createObjectURL(new Blob([__sources.webBlob + __post], { type: "text/javascript" }));
    return __inWebWorker(url, __placeMs).finally(() => URL.revokeObjectURL(url));
  },
  "node:worker_threads Worker": () => __inNodeWorker(__sources.node +
    `__keepAlive(); __runAll(__attempts, ${__attemptMs})
      .then((r) => require("node:worker_threads").parentPort.postMessage(__withStray(r)));`,
    __placeMs),
  "import() of a data: module": async () => (await __within(import("data:text/javascript," +
    encodeURIComponent(__sources.dataModule + `export default await __runAll(__attempts, ${__attemptMs});`)),
    __placeMs, "the data: module")).default,
  "import() of a blob: module": async () => {
    const url = URL.createObjectURL(new Blob(
      [__sources.blobModule + `export default await __runAll(__attempts, ${__attemptMs});`],
      { type: "text/javascript" }));
    try { return (await __within(import(url), __placeMs, "the blob: module")).default; }
    finally { URL.revokeObjectURL(url); }
  },
};
const __results = {};
await Promise.all(Object.entries(__places).map(async ([place, run]) => {
  try { __results[place] = await run(); }
  catch (e) { __results[place] = { "(the place itself)": "blocked: " + __describe(e) }; }
}));
({ names: Object.keys(__attempts), places: __results })
"""


@pytest.mark.parametrize("mode", MODES)
def test_workers_and_data_or_blob_modules_meet_the_same_barriers(
    mode: str, exposed: Exposed, listener: Listener
) -> None:
    settings = {**exposed.settings(), "port": listener.port}
    sources = {
        "webData": runner(PAYLOAD_ATTEMPTS, settings, "Web Worker (data:)"),
        "webBlob": runner(PAYLOAD_ATTEMPTS, settings, "Web Worker (blob:)"),
        "node": runner(PAYLOAD_ATTEMPTS, settings, "node worker"),
        "dataModule": runner(PAYLOAD_ATTEMPTS, settings, "data: module"),
        "blobModule": runner(PAYLOAD_ATTEMPTS, settings, "blob: module"),
        "post": POST_RESULTS,
    }
    program = (
        runner(PAYLOAD_ATTEMPTS, settings, "main")
        + f"const __sources = {json.dumps(sources)};\n"
        + f"const __placeMs = {PLACE_MS}, __attemptMs = {ATTEMPT_MS};\n"
        + PLACES_PROGRAM
    )
    console: list[str] = []
    with open_runtime(mode, console) as rt:
        guest = collect(rt.eval(program), console)
        marker = rt.eval(f"typeof globalThis.{MARKER_GLOBAL}")
    visits = listener.visits()
    assert_blocked(guest.outcomes)
    assert_never_mentions(guest, exposed.secret)
    assert marker == "undefined"
    assert not visits, f"the listener was reached: {visits}"
    places = (
        "Web Worker from a data: URL",
        "Web Worker from a blob: URL",
        "node:worker_threads Worker",
        "import() of a data: module",
        "import() of a blob: module",
    )
    assert_refused_by_permissions(
        guest.outcomes,
        *(
            f"{place} / {name}"
            for place in places
            for name in (
                "fetch file:",
                "import() of a .js module",
                "static import of a .json module",
                "fetch the listener",
                "WebSocket to the listener",
                "node:net to the listener",
            )
        ),
        *(
            f"{place} / {name}"
            for place in places[2:3]
            for name in ("node:fs readFileSync", "Deno.readTextFileSync", "Deno.connect to the listener")
        ),
    )
