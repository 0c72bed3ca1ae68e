// The pydeno worker: one Deno process serving one runtime over framed msgpack on
// stdin/stdout. The host (pydeno/host/) is the authority; this program only evaluates,
// converts values, and reports. Nothing here is trusted by the host: guest code shares
// this isolate and can forge anything this file could write.
//
// Start-up order matters: capture every intrinsic and Deno facility we need, connect the
// inspector session used for top-level-await evaluation, revoke the one permission it
// needed, hide Deno/process from the guest, and only then announce readiness.

// deno-lint-ignore-file no-explicit-any
// node:process first: the inspector loads it lazily on the first message, and that load
// reads the Deno global, which the guest must not see by then.
import "node:process";
import { Session } from "node:inspector";
import { CodecError, Reader, Writer } from "./codec.ts";

const PROTOCOL_VERSION = 1;

// Frame kinds, host -> worker (pydeno/host/_wire.py holds the same table).
const H_EVAL = 1, H_CALL = 2, H_RELEASE = 3, H_REPLY = 4, H_BIND = 5;
// Frame kinds, worker -> host.
const W_HELLO = 0, W_RESULT = 1, W_ERROR = 2, W_HOSTCALL = 3, W_CONSOLE = 4;

const D: any = (globalThis as any).Deno;
const config = JSON.parse(D.args[0] ?? "{}");
const MAX_MESSAGE_BYTES: number = config.max_message_bytes ?? 64 * 1024 * 1024;
const MAX_DEPTH: number = config.max_depth ?? 128;
const MAX_CONSOLE_CHARS: number = config.max_console_chars ?? 16 * 1024;

// --- Facilities captured before any guest code -----------------------------------------
const core = D[D.internal].core;
const evalContext: (code: string, specifier: string) => [any, any] = core.evalContext;
const stdin = D.stdin, stdout = D.stdout;
const readSync: (b: Uint8Array) => number | null = stdin.readSync.bind(stdin);
const readAsync: (b: Uint8Array) => Promise<number | null> = stdin.read.bind(stdin);
const writeSync: (b: Uint8Array) => number = stdout.writeSync.bind(stdout);
const exit: (code: number) => never = D.exit;
const inspect: (v: any, o?: any) => string = D.inspect;
const denoVersion: string = D.version.deno;
const v8Version: string = D.version.v8;

const FunctionCall = Function.prototype.call;
const uncurry = (fn: any) => FunctionCall.bind(fn) as (self: any, ...args: any[]) => any;
const ReflectApply = Reflect.apply;
const ObjectDefineProperty = Object.defineProperty;
const ObjectGetPrototypeOf = Object.getPrototypeOf;
const ObjectCreate = Object.create;
const StringFn = String;
const JSONParse = JSON.parse;
const PromiseCtor = Promise;
const PromiseProto = Promise.prototype;
const PromiseThen = uncurry(Promise.prototype.then);
const ErrorCtor = Error;
const RegExpExec = uncurry(RegExp.prototype.exec);
const StringSplit = uncurry(String.prototype.split);
const StringIncludes = uncurry(String.prototype.includes);
const StringSlice = uncurry(String.prototype.slice);
const StringReplace = uncurry(String.prototype.replace);
const ArrayJoin = uncurry(Array.prototype.join);
const ArrayPush = uncurry(Array.prototype.push);
const U8Subarray = uncurry(Uint8Array.prototype.subarray);
const U8Set = uncurry(Uint8Array.prototype.set);
const MathRandom = Math.random;
const realSetTimeout = globalThis.setTimeout;
const realClearTimeout = globalThis.clearTimeout;
const realSetInterval = globalThis.setInterval;
const realClearInterval = globalThis.clearInterval;
const queueMicrotaskReal = globalThis.queueMicrotask;
const addEventListener = globalThis.addEventListener.bind(globalThis);
const AWAIT_RE = /\bawait\b/;
const WORKER_DIR = StringSlice(import.meta.url, 0, import.meta.url.lastIndexOf("/") + 1);

// --- The inspector session: REPL-mode evaluation for top-level await --------------------
// V8's REPL mode is the only way to run a script with top-level await whose let/const
// persist. It is reachable only through the inspector, which needs sys:inspector; we
// connect, then revoke the permission before the first guest command.
const session = new Session();
session.connect();
D.permissions.revokeSync({ name: "sys", kind: "inspector" });
const post: (method: string, params: any, cb?: (err: any, res: any) => void) => void =
  session.post.bind(session);

// The inspector hands back remote objects; to get the real value into this closure a
// global is unavoidable. Its name is random and each hand-over needs a one-time token, so
// a guest that finds it can only hand us values while no token is live, which we ignore.
const STASH = `__pydeno_stash_${StringSlice(StringFn(MathRandom()), 2)}`;
let stashToken = "";
let stashed: any = undefined;
ObjectDefineProperty(globalThis, STASH, {
  value: function (value: any, token: string) {
    if (token !== "" && token === stashToken) { stashed = value; stashToken = ""; }
  },
  enumerable: false, writable: false, configurable: false,
});

function inspectorCall(method: string, params: any): Promise<any> {
  return new PromiseCtor((resolve, reject) => {
    post(method, params, (err: any, res: any) => (err ? reject(err) : resolve(res)));
  });
}

async function fetchRemote(remote: any): Promise<any> {
  if (remote.objectId === undefined) {
    if ("unserializableValue" in remote) {
      const u: string = remote.unserializableValue;
      if (u === "NaN") return NaN;
      if (u === "Infinity") return Infinity;
      if (u === "-Infinity") return -Infinity;
      if (u === "-0") return -0;
      if (StringSlice(u, -1) === "n") return BigInt(StringSlice(u, 0, -1));
    }
    return remote.type === "undefined" ? undefined : remote.value;
  }
  const token = StringSlice(StringFn(MathRandom()), 2) + StringSlice(StringFn(MathRandom()), 2);
  stashToken = token;
  stashed = undefined;
  await inspectorCall("Runtime.callFunctionOn", {
    objectId: remote.objectId,
    functionDeclaration: `function (t) { "use strict"; globalThis.${STASH}(this, t); }`,
    arguments: [{ value: token }],
    silent: true,
  });
  const value = stashed;
  stashed = undefined;
  stashToken = "";
  return value;
}

let replUsed = false;
/** Evaluates code in REPL mode; resolves [value] or rejects with the thrown value. */
async function replEval(code: string): Promise<any> {
  replUsed = true;
  const res = await inspectorCall("Runtime.evaluate", {
    expression: code, replMode: true, awaitPromise: true, objectGroup: "pydeno", silent: true,
  });
  try {
    if (res.exceptionDetails !== undefined) {
      const ex = res.exceptionDetails.exception;
      throw ex === undefined ? new ErrorCtor(res.exceptionDetails.text) : await fetchRemote(ex);
    }
    return await fetchRemote(res.result);
  } finally {
    post("Runtime.releaseObjectGroup", { objectGroup: "pydeno" });
  }
}

// --- Output ------------------------------------------------------------------------------
const functions: any = ObjectCreate(null); // handle id -> guest function
let nextFunctionId = 1;
const writer = new Writer(MAX_MESSAGE_BYTES, MAX_DEPTH, {
  registerFunction(fn) {
    const id = nextFunctionId++;
    functions[id] = fn;
    return id;
  },
});

function flushWriter(): void {
  const len = writer.pos - 4;
  const b = writer.buf;
  b[0] = len >>> 24; b[1] = (len >>> 16) & 0xff; b[2] = (len >>> 8) & 0xff; b[3] = len & 0xff;
  let off = 0;
  const total = writer.pos;
  try {
    while (off < total) off += writeSync(U8Subarray(b, off, total));
  } catch {
    // The host closed our stdout: it is gone or has given up on us.
    exit(0);
  }
}

function beginFrame(kind: number, n: number): void {
  writer.reset();
  writer.pos = 4;
  writer.header(0x90, -1, 0xdc, 0xdd, n, 15);
  writer.int(kind);
}

function sendError(id: number, e: any): void {
  const [name, message, stack] = describe(e);
  beginFrame(W_ERROR, 5);
  writer.int(id);
  writer.str(name);
  writer.str(message);
  writer.str(stack);
  flushWriter();
}

function sendResult(id: number, value: any): void {
  const mark = nextFunctionId;
  try {
    beginFrame(W_RESULT, 3);
    writer.int(id);
    writer.top(value);
  } catch (e) {
    // Handles registered while encoding a value that then failed would never be released.
    for (let i = mark; i < nextFunctionId; i++) delete functions[i];
    const [name, message] = describe(e);
    sendError(id, { name, message: `result could not be converted: ${message}`, stack: "" });
    return;
  }
  flushWriter();
}

function sendConsole(level: string, text: string): void {
  if (text.length > MAX_CONSOLE_CHARS) {
    text = StringSlice(text, 0, MAX_CONSOLE_CHARS) + ` …[${text.length - MAX_CONSOLE_CHARS} more characters]`;
  }
  beginFrame(W_CONSOLE, 3);
  writer.str(level);
  writer.str(text);
  flushWriter();
}

/** name, message, stack of a thrown value, read defensively: the guest may have made any of
 * them a throwing getter, and the stack loses the frames that belong to this worker. */
function describe(e: any): [string, string, string] {
  let name = "", message = "", stack = "";
  if ((typeof e === "object" && e !== null) || typeof e === "function") {
    try { name = e.name === undefined ? "" : StringFn(e.name); } catch { name = "Error"; }
    try { message = e.message === undefined ? "" : StringFn(e.message); } catch { message = ""; }
    try { stack = typeof e.stack === "string" ? e.stack : ""; } catch { stack = ""; }
    if (name === "" && message === "") {
      try { message = StringFn(e); } catch { message = "<unprintable thrown value>"; }
    }
  } else {
    try { message = StringFn(e); } catch { message = "<unprintable thrown value>"; }
  }
  if (stack !== "") {
    const kept: string[] = [];
    const lines = StringSplit(stack, "\n");
    for (let i = 0; i < lines.length; i++) {
      const line = lines[i];
      if (StringIncludes(line, "ext:core/") || StringIncludes(line, WORKER_DIR) ||
          StringIncludes(line, "ext:deno_node/inspector")) continue;
      ArrayPush(kept, line);
    }
    stack = ArrayJoin(kept, "\n");
  }
  return [name, message, stack];
}

// --- Guest-facing globals ----------------------------------------------------------------
function formatArgs(args: any[]): string {
  const parts: string[] = [];
  for (let i = 0; i < args.length; i++) {
    const a = args[i];
    let s: string;
    try { s = typeof a === "string" ? a : inspect(a, { depth: 4, colors: false }); } catch { s = "<uninspectable>"; }
    ArrayPush(parts, s);
  }
  return ArrayJoin(parts, " ");
}

function consoleMethod(level: string) {
  return function (...args: any[]) { sendConsole(level, formatArgs(args)); };
}
const guestConsole: any = {};
for (const [method, level] of [
  ["log", "log"], ["info", "info"], ["debug", "debug"], ["warn", "warn"], ["error", "error"],
  ["trace", "debug"], ["dir", "log"], ["table", "log"],
]) guestConsole[method] = consoleMethod(level);
guestConsole.assert = function (cond: any, ...args: any[]) {
  if (!cond) sendConsole("error", "Assertion failed" + (args.length ? ": " + formatArgs(args) : ""));
};
for (const noop of ["group", "groupEnd", "groupCollapsed", "time", "timeEnd", "timeLog", "count", "countReset", "clear"]) {
  guestConsole[noop] = function () {};
}

// Timers are counted so that the read loop knows when nothing can happen without input and
// may block in a synchronous read, which is several times faster than an async one.
const liveTimers: any = ObjectCreate(null);
let liveTimerCount = 0;
function track(id: any): void { if (liveTimers[id] !== true) { liveTimers[id] = true; liveTimerCount++; } }
function untrack(id: any): void { if (liveTimers[id] === true) { delete liveTimers[id]; liveTimerCount--; } }
const guestSetTimeout = function (cb: any, ms?: any, ...args: any[]) {
  if (typeof cb !== "function") return 0;
  const id: any = realSetTimeout(() => { untrack(id); ReflectApply(cb, undefined, args); }, ms);
  track(id);
  return id;
};
const guestClearTimeout = function (id?: any) { untrack(id); realClearTimeout(id); };
const guestSetInterval = function (cb: any, ms?: any, ...args: any[]) {
  if (typeof cb !== "function") return 0;
  const id: any = realSetInterval(() => { ReflectApply(cb, undefined, args); }, ms);
  track(id);
  return id;
};
const guestClearInterval = function (id?: any) { untrack(id); realClearInterval(id); };

// Errors thrown from timers and unhandled rejections would end a Deno process; here they
// are reported on the console channel and the worker carries on.
addEventListener("error", (ev: any) => {
  ev.preventDefault();
  const [name, message] = describe(ev.error);
  sendConsole("error", `Uncaught ${name ? name + ": " : ""}${message}`);
});
addEventListener("unhandledrejection", (ev: any) => {
  ev.preventDefault();
  const [name, message] = describe(ev.reason);
  sendConsole("error", `Uncaught (in promise) ${name ? name + ": " : ""}${message}`);
});

// --- Host calls (bound functions) ----------------------------------------------------------
const pendingCalls: any = ObjectCreate(null); // call id -> [resolve, reject]
let nextCallId = 1;

function hostCall(name: string, args: any[]): Promise<any> {
  const id = nextCallId++;
  const mark = nextFunctionId;
  try {
    beginFrame(W_HOSTCALL, 4);
    writer.int(id);
    writer.str(name);
    writer.top(args);
  } catch (e) {
    for (let i = mark; i < nextFunctionId; i++) delete functions[i];
    const [, message] = describe(e);
    return PromiseReject(new TypeErrorCtor(`arguments to ${name}() could not be converted: ${message}`));
  }
  const p = new PromiseCtor((resolve, reject) => { pendingCalls[id] = [resolve, reject]; });
  flushWriter();
  return p;
}
const PromiseReject = Promise.reject.bind(Promise);
const TypeErrorCtor = TypeError;

function bind(name: string): void {
  const fn = { [name]: function (...args: any[]) { return hostCall(name, args); } }[name];
  ObjectDefineProperty(globalThis, name, { value: fn, writable: true, enumerable: false, configurable: true });
}

// --- Commands ------------------------------------------------------------------------------
let inflight = 0;
let evalCount = 0;

async function runEval(id: number, code: string): Promise<void> {
  inflight++;
  try {
    let value: any;
    if (RegExpExec(AWAIT_RE, code) !== null) {
      value = await replEval(code);
    } else {
      const [result, error] = evalContext(code, `guest:eval-${++evalCount}`);
      if (error !== null) throw error.thrown;
      value = result;
    }
    if (value !== null && typeof value === "object" && ObjectGetPrototypeOf(value) === PromiseProto) {
      value = await value;
    }
    sendResult(id, value);
  } catch (e) {
    sendError(id, e);
  } finally {
    inflight--;
  }
}

async function runCall(id: number, fnId: number, args: any[]): Promise<void> {
  inflight++;
  try {
    const fn = functions[fnId];
    if (fn === undefined) throw new ErrorCtor("Function has been closed");
    let value = ReflectApply(fn, undefined, args);
    if (value !== null && typeof value === "object" && ObjectGetPrototypeOf(value) === PromiseProto) {
      value = await value;
    }
    sendResult(id, value);
  } catch (e) {
    sendError(id, e);
  } finally {
    inflight--;
  }
}

const reader = new Reader(new Uint8Array(0), 0, 0, MAX_DEPTH, {
  lookupFunction(id: number) {
    const fn = functions[id];
    if (fn === undefined) throw new CodecError("a function handle refers to a function that was closed");
    return fn;
  },
});

function dispatch(buf: Uint8Array, start: number, end: number): void {
  reader.buf = buf;
  reader.view = new DataView(buf.buffer);
  reader.pos = start;
  reader.end = end;
  const head = reader.u8();
  if (head < 0x90 || head > 0x9f) throw new ErrorCtor("host frame is not a short array");
  const kind = reader.value(0);
  switch (kind) {
    case H_EVAL: {
      const id = reader.value(0), code = reader.value(0);
      runEval(id, code);
      return;
    }
    case H_CALL: {
      const id = reader.value(0), fnId = reader.value(0);
      let args: any;
      try { args = reader.value(0); } catch (e) { sendError(id, e); return; }
      runCall(id, fnId, args);
      return;
    }
    case H_RELEASE: {
      const ids = reader.value(0);
      for (let i = 0; i < ids.length; i++) delete functions[ids[i]];
      return;
    }
    case H_REPLY: {
      const callId = reader.value(0), ok = reader.value(0);
      const pending = pendingCalls[callId];
      delete pendingCalls[callId];
      let payload: any, failed = !ok;
      try { payload = reader.value(0); } catch (e) { payload = e; failed = true; }
      if (pending === undefined) return;
      if (!failed) pending[0](payload);
      else if (payload instanceof ErrorCtor) pending[1](payload);
      else {
        const err = new ErrorCtor(StringFn(payload[1]));
        ObjectDefineProperty(err, "name", { value: StringFn(payload[0]), writable: true, configurable: true });
        pending[1](err);
      }
      return;
    }
    case H_BIND: {
      const id = reader.value(0), name = reader.value(0);
      try { bind(name); sendResult(id, undefined); } catch (e) { sendError(id, e); }
      return;
    }
  }
  throw new ErrorCtor(`unknown frame kind ${kind} from host`);
}

// --- Hide the runtime from the guest, announce, serve ---------------------------------------
const g: any = globalThis;
ObjectDefineProperty(g, "console", { value: guestConsole, writable: true, enumerable: false, configurable: true });
g.setTimeout = guestSetTimeout;
g.clearTimeout = guestClearTimeout;
g.setInterval = guestSetInterval;
g.clearInterval = guestClearInterval;
delete g.Deno;
delete g.process;
delete g.require;

beginFrame(W_HELLO, 4);
writer.int(PROTOCOL_VERSION);
writer.str(denoVersion);
writer.str(v8Version);
flushWriter();

let rbuf = new Uint8Array(1 << 16);
let rcap = 1 << 16;
let rstart = 0, rend = 0;
let pendingRead: Promise<number | null> | null = null;

async function serve(): Promise<void> {
  for (;;) {
    // Parse every complete frame in the buffer.
    while (rend - rstart >= 4) {
      const len = ((rbuf[rstart] << 24) >>> 0) + (rbuf[rstart + 1] << 16) + (rbuf[rstart + 2] << 8) + rbuf[rstart + 3];
      if (rend - rstart - 4 < len) {
        if (len + 4 > rcap) {
          let size = rcap * 2;
          while (size < len + 4) size *= 2;
          const next = new Uint8Array(size);
          U8Set(next, U8Subarray(rbuf, rstart, rend));
          rbuf = next; rcap = size; rend -= rstart; rstart = 0;
        }
        break;
      }
      const start = rstart + 4;
      rstart = start + len;
      dispatch(rbuf, start, start + len);
    }
    if (rstart === rend) { rstart = 0; rend = 0; }
    else if (rcap - rend < 4096) {
      U8Set(rbuf, U8Subarray(rbuf, rstart, rend));
      rend -= rstart; rstart = 0;
    }
    let n: number | null;
    if (pendingRead === null && inflight === 0 && liveTimerCount === 0) {
      // Nothing can make progress without input: block in the fast synchronous read, after
      // one microtask checkpoint so that anything just resolved has run.
      await null;
      if (inflight === 0 && liveTimerCount === 0) {
        n = readSync(U8Subarray(rbuf, rend));
      } else {
        pendingRead = readAsync(U8Subarray(rbuf, rend));
        n = await pendingRead;
        pendingRead = null;
      }
    } else {
      if (pendingRead === null) pendingRead = readAsync(U8Subarray(rbuf, rend));
      n = await pendingRead;
      pendingRead = null;
    }
    if (n === null) exit(0);
    rend += n!;
  }
}

void JSONParse; void StringReplace; void queueMicrotaskReal; void PromiseThen; void replUsed;
serve().catch((e) => {
  // A frame the worker cannot parse means the two ends disagree; the host will see the exit.
  const [name, message] = describe(e);
  try { sendConsole("error", `worker loop failed: ${name}: ${message}`); } catch { /* ignore */ }
  exit(70);
});
