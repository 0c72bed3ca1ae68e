"""The escape battery, network: the guest reaches no address, by any API, under every sandbox
mode, and the test's TCP and UDP listeners see no packet."""

from __future__ import annotations

from typing import Final

import pytest

from tests.security.escapes.harness import MODES, Listener, assert_blocked, assert_refused_by_permissions, attempt

# Real workers by the hundred: outside the fast subset (pytest -m "not slow").
pytestmark = pytest.mark.slow


NETWORK_ATTEMPTS: Final = r"""(() => {
  const http = `http://127.0.0.1:${__cfg.port}/`;
  return {
    "fetch http://127.0.0.1": async () => `status ${(await fetch(http)).status}`,
    "fetch http://localhost": async () => `status ${(await fetch(`http://localhost:${__cfg.port}/`)).status}`,
    "WebSocket": () => __event((resolve, reject) => {
      const ws = new WebSocket(`ws://127.0.0.1:${__cfg.port}/`);
      ws.onopen = () => resolve("opened a WebSocket");
      ws.onerror = (event) => reject(__fail("WebSocketError", event.message ?? "an error event"));
      ws.onclose = (event) => reject(__fail("WebSocketClosed", `closed with code ${event.code}`));
      return () => ws.close();
    }, 1200, "the WebSocket"),
    "EventSource": () => __event((resolve, reject) => {
      const es = new EventSource(http);
      es.onopen = () => resolve("opened an EventSource");
      es.onerror = (event) => reject(__fail("EventSourceError", event.message ?? "an error event"));
      return () => es.close();
    }, 1200, "the EventSource"),
    "node:net createConnection": async () => {
      const net = await import("node:net");
      return await __event((resolve, reject) => {
        const s = net.createConnection({ host: "127.0.0.1", port: __cfg.port });
        s.on("connect", () => resolve("connected"));
        s.on("error", reject);
        return () => s.destroy();
      }, 1200, "node:net");
    },
    "node:http request": async () => {
      const nodeHttp = await import("node:http");
      return await __event((resolve, reject) => {
        const req = nodeHttp.request(http, (res) => resolve(`status ${res.statusCode}`));
        req.on("error", reject);
        req.end();
        return () => req.destroy();
      }, 1200, "node:http");
    },
    "node:http listen": async () => {
      const nodeHttp = await import("node:http");
      return await __event((resolve, reject) => {
        const server = nodeHttp.createServer();
        server.on("error", reject);
        server.listen(0, "127.0.0.1", () => resolve(`listening on ${server.address().port}`));
        return () => server.close();
      }, 1200, "node:http listen");
    },
    "node:dgram send": async () => {
      const dgram = await import("node:dgram");
      return await __event((resolve, reject) => {
        const s = dgram.createSocket("udp4");
        s.on("error", reject);
        s.send("pydeno", __cfg.udpPort, "127.0.0.1", (e) => (e ? reject(e) : resolve("sent a datagram")));
        return () => s.close();
      }, 1200, "node:dgram");
    },
    "node:dns lookup": async () => {
      const dns = await import("node:dns");
      return await __event((resolve, reject) => {
        dns.lookup("localhost", (e, address) => (e ? reject(e) : resolve(`resolved ${address}`)));
        return undefined;
      }, 1200, "node:dns");
    },
    "import() over http": async () => (await import(`${http}module.js`)).default,
    "Worker from http": () => __inWebWorker(`${http}worker.js`, 1200),
    "Deno.connect": async () => {
      const conn = await __deno().connect({ hostname: "127.0.0.1", port: __cfg.port });
      conn.close();
      return "connected";
    },
    "Deno.listen": () => {
      __deno().listen({ hostname: "127.0.0.1", port: 0 }).close();
      return "listened";
    },
  };
})()"""


@pytest.mark.parametrize("mode", MODES)
def test_the_guest_cannot_reach_the_network(mode: str, listener: Listener) -> None:
    settings = {"port": listener.port, "udpPort": listener.udp_port}
    guest = attempt(mode, NETWORK_ATTEMPTS, settings)
    visits = listener.visits()
    assert_blocked(guest.outcomes)
    assert not visits, f"the listener was reached: {visits}"
    assert_refused_by_permissions(
        guest.outcomes,
        *(
            f"{place} / {name}"
            for place in ("main", "worker")
            for name in ("fetch http://127.0.0.1", "WebSocket", "node:net createConnection", "node:http request")
        ),
        "main / import() over http",
        "node worker / Deno.connect",
        "node worker / Deno.listen",
    )
