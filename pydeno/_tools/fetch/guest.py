"""The guest's side of HttpFetch: the name of its one host function and the JavaScript fetch()
installed over it in a worker."""

from __future__ import annotations

from typing import Final

HOST_FUNCTION: Final = "__pydeno_fetch"

# The guest's fetch(): a thin wrapper over the one host function, made of intrinsics taken
# before any guest code runs, so that a guest which poisons prototypes or globals later
# still gets a correct answer (or a clean error) from it.
INSTALL: Final = """(() => {
  const call = globalThis.__HOST__;
  delete globalThis.__HOST__;
  const apply = Reflect.apply;
  const define = Object.defineProperty;
  const keys = Object.keys;
  const isArray = Array.isArray;
  const Str = String;
  const U8 = Uint8Array;
  const isView = ArrayBuffer.isView;
  const TypeErr = TypeError;
  const parse = JSON.parse;
  const lower = String.prototype.toLowerCase;
  const arrayValues = Array.prototype.values;
  const TA = Object.getPrototypeOf(U8.prototype);
  const bufferOf = Object.getOwnPropertyDescriptor(TA, "buffer").get;
  const offsetOf = Object.getOwnPropertyDescriptor(TA, "byteOffset").get;
  const lengthOf = Object.getOwnPropertyDescriptor(TA, "byteLength").get;
  const sliceBuffer = ArrayBuffer.prototype.slice;
  const decoder = new TextDecoder();
  const decode = TextDecoder.prototype.decode;
  const headersForEach = Headers.prototype.forEach;
  const paramsToString = URLSearchParams.prototype.toString;
  const own = (o, k, v) =>
    define(o, k, { __proto__: null, value: v, enumerable: true, writable: true, configurable: true });
  const push = (a, v) => own(a, a.length, v);
  const branded = (fn, o) => { try { apply(fn, o, []); return true; } catch { return false; } };
  const copy = (b) => {
    const start = apply(offsetOf, b, []);
    return apply(sliceBuffer, apply(bufferOf, b, []), [start, start + apply(lengthOf, b, [])]);
  };
  const pairs = (headers) => {
    const out = [];
    if (headers === undefined || headers === null) return out;
    if (typeof headers !== "object") {
      throw new TypeErr("fetch: init.headers must be an object, an array of pairs or a Headers");
    }
    if (isArray(headers)) {
      for (let i = 0; i < headers.length; i++) {
        const p = headers[i];
        if (!isArray(p) || p.length !== 2) throw new TypeErr("fetch: each header must be a [name, value] pair");
        push(out, [Str(p[0]), Str(p[1])]);
      }
      return out;
    }
    try {
      apply(headersForEach, headers, [(v, k) => push(out, [Str(k), Str(v)])]);
      return out;
    } catch {}
    const names = keys(headers);
    for (let i = 0; i < names.length; i++) push(out, [names[i], Str(headers[names[i]])]);
    return out;
  };
  const bodyOf = (body, headers) => {
    if (body === undefined || body === null) return null;
    if (typeof body === "string") return body;
    if (branded(bufferOf, body)) return new U8(copy(body));
    if (isView(body)) return new U8(body.buffer, body.byteOffset, body.byteLength);
    if (branded(sliceBuffer, body)) return new U8(body);
    if (branded(paramsToString, body)) {
      push(headers, ["content-type", "application/x-www-form-urlencoded;charset=UTF-8"]);
      return apply(paramsToString, body, []);
    }
    throw new TypeErr("fetch: init.body must be a string, a Uint8Array, an ArrayBuffer or URLSearchParams");
  };
  class FetchHeaders {
    #map = { __proto__: null };
    constructor(list) {
      for (let i = 0; i < list.length; i++) {
        const name = list[i][0];
        const known = this.#map[name];
        this.#map[name] = known === undefined ? list[i][1] : `${known}, ${list[i][1]}`;
      }
    }
    get(name) {
      const v = this.#map[apply(lower, Str(name), [])];
      return v === undefined ? null : v;
    }
    has(name) { return this.#map[apply(lower, Str(name), [])] !== undefined; }
    forEach(callback, self) {
      const n = keys(this.#map);
      for (let i = 0; i < n.length; i++) apply(callback, self, [this.#map[n[i]], n[i], this]);
    }
    entries() {
      const out = [];
      const n = keys(this.#map);
      for (let i = 0; i < n.length; i++) push(out, [n[i], this.#map[n[i]]]);
      return apply(arrayValues, out, []);
    }
    keys() { return apply(arrayValues, keys(this.#map), []); }
    values() {
      const out = [];
      const n = keys(this.#map);
      for (let i = 0; i < n.length; i++) push(out, this.#map[n[i]]);
      return apply(arrayValues, out, []);
    }
    [Symbol.iterator]() { return this.entries(); }
  }
  class FetchResponse {
    #body;
    #used = false;
    constructor(r) {
      own(this, "status", r.status);
      own(this, "statusText", r.statusText);
      own(this, "ok", r.status >= 200 && r.status < 300);
      own(this, "url", r.url);
      own(this, "redirected", r.redirected);
      own(this, "type", "basic");
      own(this, "headers", new FetchHeaders(r.headers));
      this.#body = r.body;
    }
    get bodyUsed() { return this.#used; }
    #take() {
      if (this.#used) throw new TypeErr("fetch: the response body was already read");
      this.#used = true;
      return this.#body;
    }
    async bytes() { return new U8(copy(this.#take())); }
    async arrayBuffer() { return copy(this.#take()); }
    async text() { return apply(decode, decoder, [this.#take()]); }
    async json() { return parse(apply(decode, decoder, [this.#take()])); }
  }
  async function fetch(input, init) {
    const url = typeof input === "string" ? input
      : (input !== null && typeof input === "object" && typeof input.url === "string" ? input.url : Str(input));
    const options = init === undefined || init === null ? { __proto__: null } : init;
    const headers = pairs(options.headers);
    const body = bodyOf(options.body, headers);
    const method = options.method === undefined ? "GET" : Str(options.method);
    const redirect = options.redirect === undefined ? "follow" : Str(options.redirect);
    return new FetchResponse(await call(url, { __proto__: null, method, headers, body, redirect }));
  }
  define(globalThis, "fetch", {
    __proto__: null, value: fetch, writable: false, enumerable: false, configurable: false,
  });
})()""".replace("__HOST__", HOST_FUNCTION)
