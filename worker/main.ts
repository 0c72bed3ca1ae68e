// The pydeno worker: one Deno process serving one runtime over framed msgpack on
// stdin/stdout. The host (pydeno/host/) is the authority; this program only evaluates,
// converts values, and reports. Nothing here is trusted by the host: guest code shares
// this isolate and can forge anything this file could write.
//
// Start-up order matters: capture every intrinsic and Deno facility we need, revoke every
// permission, hide Deno/process from the guest, and only then announce readiness.

// deno-lint-ignore-file no-explicit-any
import { CodecError, holesReadUndefined, isErrorValue, Reader, Writer } from "./codec.ts";
import {
  addModule,
  asWritten,
  editedName,
  evalName,
  isRewritten,
  exportsOf,
  hasModules,
  mapModuleStack,
  moduleCompileError,
  programUrl,
  rewriteEval,
  unresolved,
} from "./modules.ts";
import { addPackage, loaded } from "./packages.ts";
import { convertImports } from "./imports.ts";
import { type Names, rewrite, type Rewrite } from "./repl.ts";
import { type Strip, uncurry } from "./intrinsics.ts";
import {
  compileError,
  compileFailure,
  EVAL_SCRIPT,
  mapStack,
  scriptPosition,
  stripped,
  toJavaScript,
} from "./typescript.ts";
import {
  CONSOLE_LEVELS,
  DENO_PERMISSIONS,
  EXIT_DONE,
  EXIT_INTERNAL,
  EXIT_PERMISSION_KEPT,
  FRAME_HEADER_BYTES,
  H_BIND,
  H_CALL,
  H_EVAL,
  H_EVAL_MODULE,
  H_PACKAGE,
  H_EVAL_PROGRAM,
  H_EVAL_TS,
  H_MODULE,
  H_RELEASE,
  H_REPLY,
  H_TERMINATE,
  H_WASM,
  MAILBOX_COUNT_BYTES,
  PROTOCOL_VERSION,
  SETTINGS_VARIABLE,
  W_CONSOLE,
  W_ERROR,
  W_HELLO,
  W_HOSTCALL,
  W_PART,
  W_RESULT,
  W_TERMINATED,
  MAX_SETTINGS_BYTES,
  WORKER_PREFIX,
  type StartSettings,
  type WorkerSettings,
} from "./protocol.ts";

// The host kills a worker whose console frame names any other level.
type ConsoleLevel = typeof CONSOLE_LEVELS[number];

const D: any = (globalThis as any).Deno;
// What every worker of this staging shares (the self-test's expected environment): the rest
// of the settings come over stdin once start-up needs them (see "This worker's settings").
// Dropped once start-up has read it: the self-test's expected environment names host files,
// and a heap snapshot (node:v8) shows the guest every string still alive in this isolate.
let startSettings: StartSettings = JSON.parse((() => {
  try { return D.env.get(SETTINGS_VARIABLE) ?? "{}"; } catch { return "{}"; }
})());

// --- Facilities captured before any guest code -----------------------------------------
const core = D[D.internal].core;
const evalContext: (code: string, specifier: string) => [any, any] = core.evalContext;
// Deno's core ops on the standard descriptors, not Deno.stdin/stdout: their wrappers read
// buffer.length through a prototype the guest can poison. 0 bytes read means end of file.
const STDIN_RID = 0, STDOUT_RID = 1;
const coreReadSync: (rid: number, b: Uint8Array) => number = core.readSync;
const coreRead: (rid: number, b: Uint8Array) => Promise<number> = core.read;
const coreWriteSync: (rid: number, b: Uint8Array) => number = core.writeSync;
const readSync = (b: Uint8Array): number => coreReadSync(STDIN_RID, b);
const readAsync = (b: Uint8Array): Promise<number> => coreRead(STDIN_RID, b);
const writeSync = (b: Uint8Array): number => coreWriteSync(STDOUT_RID, b);
const drainTicks: () => void = core.runNextTicks;
const compileFunction: (source: string, specifier: string, options: any, params: string[]) => [any, any] =
  core.compileFunction;
const destructureError: (e: any) => any = core.destructureError;
// V8's gc() (the host starts it with --expose-gc): the worker's, not the guest's. V8 makes
// the global non-configurable, so it stays, undefined.
const collectGarbage: ((options: any) => void) | undefined = (globalThis as any).gc;
(globalThis as any).gc = undefined;
const eventLoopHasMoreWork: () => boolean = core.eventLoopHasMoreWork;
const queueNextTick: (tick: any) => void = core.queueNextTick;
const exit: (code: number) => never = D.exit;
const inspect: (v: any, o?: any) => string = D.inspect;
const denoVersion: string = D.version.deno;
const memoryUsage: () => { rss: number; heapUsed: number } = D.memoryUsage;
const v8Version: string = D.version.v8;

const ReflectApply = Reflect.apply;
const ObjectDefineProperty = Object.defineProperty;
const ObjectGetPrototypeOf = Object.getPrototypeOf;
const ObjectCreate = Object.create;
const ArrayIsArray = Array.isArray;
const MathCeil = Math.ceil;
const StringFn = String;
const PromiseCtor = Promise;
const PromiseProto = Promise.prototype;
const ErrorCtor = Error;
const RegExpExec = uncurry(RegExp.prototype.exec);
const StringIncludes = uncurry(String.prototype.includes);
const StringLastIndexOf = uncurry(String.prototype.lastIndexOf);
const StringIndexOf = uncurry(String.prototype.indexOf);
const StringSlice = uncurry(String.prototype.slice);
const StringCharCodeAt = uncurry(String.prototype.charCodeAt);
const StringStartsWith = uncurry(String.prototype.startsWith);
const U8Subarray = uncurry(Uint8Array.prototype.subarray);
const U8Set = uncurry(Uint8Array.prototype.set);
const PromiseThen = uncurry(Promise.prototype.then) as (promise: any, ok?: any, no?: any) => any;
// Unguessable names and tokens: Math.random's state can be recovered from its outputs.
const getRandomValues = crypto.getRandomValues.bind(crypto);
const NumberToString = uncurry(Number.prototype.toString);
function randomHex(): string {
  const bytes = getRandomValues(new Uint8ArrayCtor(16));
  let out = "";
  for (let i = 0; i < 16; i++) out += StringSlice(NumberToString(0x100 + bytes[i], 16), 1);
  return out;
}
const Uint8ArrayCtor = Uint8Array;
const coreEncode: (s: string) => Uint8Array = core.encode;
const addEventListener = globalThis.addEventListener.bind(globalThis);
const AWAIT_RE = /\bawait\b/;
const ObjectGetOwnPropertyDescriptor = Object.getOwnPropertyDescriptor;
const ObjectGetOwnPropertyNames = Object.getOwnPropertyNames;
const ObjectSetPrototypeOf = Object.setPrototypeOf;
const ObjectHasOwn = Object.hasOwn;
const ReflectDeleteProperty = Reflect.deleteProperty;
const IsPromise: (v: any) => boolean = core.isPromise;
const ArrayPrototype: any = Array.prototype;
const ObjectPrototype = Object.prototype;
const ArrayIteratorPrototype: any = ObjectGetPrototypeOf([][Symbol.iterator]());
const originalArrayIterator = Array.prototype[Symbol.iterator];
const originalArrayIteratorNext = ArrayIteratorPrototype.next;
const SymbolIterator = Symbol.iterator;
// The guest may replace or delete WebAssembly before the host loads a module (rt.load_wasm).
// Undefined under --jitless: V8 then has no WebAssembly at all.
const WasmModule: any = (globalThis as any).WebAssembly?.Module;

/** Whether Deno's evalContext wrapper can still be trusted to hand back what it got. */
function classicScriptSafe(): boolean {
  if (ArrayPrototype[SymbolIterator] !== originalArrayIterator) return false;
  if (ArrayIteratorPrototype.next !== originalArrayIteratorNext) return false;
  // Indices 0 and 1 carry the result and the error; nothing else of that array is used.
  // Array.prototype cannot have them: its length is read-only (see "Index properties").
  return ObjectGetOwnPropertyDescriptor(ObjectPrototype, 0) === undefined &&
    ObjectGetOwnPropertyDescriptor(ObjectPrototype, 1) === undefined;
}
const WORKER_DIR = StringSlice(import.meta.url, 0, import.meta.url.lastIndexOf("/") + 1);

// --- The sandbox self-test ----------------------------------------------------------------
// Only when the host applied OS layers (startSettings.selftest). The launcher has already tried, under
// every layer deno inherits, to read, list and create files, to listen and connect, to start a
// process and to signal the host (pydeno/host/process/layers.py): what only deno sees is left here, the
// environment it was handed. Deno was started with a grant to read all of it, revoked below
// with every other before anything else runs; the worker exits if one stays granted. What got
// through travels in the handshake; the host decides whether that refuses start-up.
// A function, not a block of this module: what a block's closures capture (the environment)
// would stay alive with the module for the guest's heap snapshots to find.
const breaches: string[] = [];
if (startSettings.selftest) selfTest(startSettings.selftest);
startSettings = {};

function selfTest(st: any): void {
  // st.env is the whole environment expected: what the launcher set and what deno adds to
  // it. Counts only: names and values of anything else stay out of every message.
  const env = D.env.toObject();
  const extra = Object.keys(env).filter((name) => name !== SETTINGS_VARIABLE && env[name] !== st.env[name]).length;
  if (extra) breaches.push(`saw ${extra} environment variables the host did not set`);
}

// --- This worker's settings ------------------------------------------------------------
// The host's first frame on stdin: this worker's limits and its mailbox's path. Everything
// above is the same for every worker of this staging, so a worker can be started ahead of
// the runtime it will serve (the zygote's spare) and wait here, blocked in read(), until the
// host that takes it sends them. Read whole, and no further: what follows is the host's first
// command, for the read loop.
const SETTINGS_BYTES = FRAME_HEADER_BYTES + readSettingsLength();
let config: WorkerSettings = JSON.parse(new TextDecoder().decode(readExactly(SETTINGS_BYTES - FRAME_HEADER_BYTES)));
const MAX_MESSAGE_BYTES: number = config.max_message_bytes ?? 64 * 1024 * 1024;
const MAX_DEPTH: number = config.max_depth ?? 128;
const MAX_CONSOLE_CHARS: number = config.max_console_chars ?? 16 * 1024;
const MAX_INFLIGHT: number = config.max_inflight_host_calls ?? 32;
// Per command. The host counts and enforces this too; stopping here saves the pipe.
const MAX_CONSOLE_BYTES: number = config.max_console_bytes ?? 1 << 20;

function readSettingsLength(): number {
  const h = readExactly(FRAME_HEADER_BYTES);
  const len = ((h[0] << 24) >>> 0) + (h[1] << 16) + (h[2] << 8) + h[3];
  if (len > MAX_SETTINGS_BYTES) {
    coreWriteSync(2, new TextEncoder().encode(`${WORKER_PREFIX}a settings frame of ${len} bytes\n`));
    exit(EXIT_INTERNAL);
  }
  return len;
}

function readExactly(n: number): Uint8Array {
  const b = new Uint8ArrayCtor(n);
  for (let got = 0; got < n;) {
    const more = readSync(U8Subarray(b, got));
    if (more === 0) exit(EXIT_DONE); // the host hung up before it sent them
    got += more;
  }
  return b;
}

// --- The mailbox: waiting for input without sleeping ----------------------------------------
// A pipe write that wakes a sleeping reader costs the writer tens of microseconds on a VM,
// the better part of a warm eval. The host also keeps, in a file only it writes, the count
// of bytes it has written to our stdin, updated after each write; a file read never blocks.
// So for a short while after each command the worker polls that count instead of sleeping
// in read(), and reads stdin once the count says bytes are there (see waitForInput). Opened
// with a read grant for this one path, revoked just below with every other grant.
let mailboxCount: (() => number) | null = null;
if (typeof config.mailbox === "string") {
  const path: string = config.mailbox;
  try {
    const file = D.openSync(path, { read: true });
    const seek = file.seekSync.bind(file);
    const read = file.readSync.bind(file);
    const cell = new Uint8ArrayCtor(MAILBOX_COUNT_BYTES);
    mailboxCount = () => {
      seek(0, 0);
      // A short or failed read leaves the count where it was: the worker then just sleeps.
      if (read(cell) !== MAILBOX_COUNT_BYTES) return 0;
      return cell[0] + cell[1] * 0x100 + cell[2] * 0x10000 + cell[3] * 0x1000000 +
        (cell[4] + cell[5] * 0x100 + cell[6] * 0x10000) * 0x100000000;
    };
  } catch { /* no mailbox: the worker sleeps in read() as before */ }
}

for (const name of DENO_PERMISSIONS) D.permissions.revokeSync({ name });
const kept = DENO_PERMISSIONS.filter((name) => D.permissions.querySync({ name }).state === "granted");
// The mailbox's own grant, by opening it again: a query for that path would stay in Deno's
// cache of permission states, path and all, for as long as the worker lives.
if (typeof config.mailbox === "string") {
  try {
    D.openSync(config.mailbox, { read: true }).close();
    kept.push("read");
  } catch { /* refused: the grant is gone */ }
}
if (kept.length) {
  coreWriteSync(2, new TextEncoder().encode(`${WORKER_PREFIX}the ${kept[0]} permission is still granted\n`));
  exit(EXIT_PERMISSION_KEPT);
}
// node:process reads the Deno global as it loads, and Deno's node: modules load it. Loading
// it up front costs every worker some milliseconds of start-up and some MiB, although only
// runtimes that use TypeScript or a node: module need it; so the first such use loads it,
// with the global back for exactly that synchronous load, which runs no guest code. Guest code could
// observe that moment only through accessors it planted on shared prototypes; what it would
// see is the Deno namespace with every permission revoked, whose execPath() says "deno" and
// which has no main module (see guardWorkers): the load finds no host path there to hand on.
let nodeProcessLoaded = false;
const nodeProcessGetter = ObjectGetOwnPropertyDescriptor(globalThis, "process")?.get;
function loadNodeProcess(): void {
  if (nodeProcessLoaded) return;
  nodeProcessLoaded = true;
  const had = ObjectGetOwnPropertyDescriptor(globalThis, "Deno");
  try {
    ObjectDefineProperty(globalThis, "Deno", { __proto__: null, value: D, writable: true, enumerable: false, configurable: true } as PropertyDescriptor);
    // node:process is importable from here on; its argv names this file, and so where the
    // host keeps the worker.
    if (nodeProcessGetter !== undefined) {
      const nodeProcess = ReflectApply(nodeProcessGetter, globalThis, []);
      const argv: any = [nodeProcess.argv[0], "main.ts"];
      ObjectDefineProperty(nodeProcess, "argv", { __proto__: null, value: argv, writable: true, enumerable: true, configurable: true } as PropertyDescriptor);
      delete (globalThis as any).process;
    }
  } catch { /* what needed it reports what is broken */ } finally {
    try {
      if (had === undefined) delete (globalThis as any).Deno;
      else ObjectDefineProperty(globalThis, "Deno", had);
    } catch { /* a guest that made Deno non-configurable keeps its own */ }
  }
}

// --- Memory over a long life --------------------------------------------------------------
// V8 compiles each classic script into the old generation, which only a full collection
// sweeps, and keeps it in its compilation cache, alive whole (source, bytecode, function
// info), until its bytecode has gone unused for minutes: every eval of new code adds about two
// thirds of a KiB that no collection in between gives back (a repeated eval about a sixth).
// And the read loop below seldom yields to the event loop, so V8's memory reducer, which trims
// the heap of an isolate gone quiet, never runs. So every MEMORY_LOOK_EVERY commands, between
// two of them, the worker looks at its resident memory, and once that has grown past an
// allowance, asks V8 for a collection of all it can (gc's "last resort", what V8 does when told
// memory is low), which also empties the compilation cache and gives freed pages back to the
// system. A collection costs time in proportion to what is alive, so each allowance is also
// never less than half of what the last collection left alive above what the first one left.
//
// The collection also shrinks the young generation to its least, and over the next few hundred
// commands it grows back to its working size (both semi-spaces of the size the host starts V8
// with, or more, as V8 sizes them to how fast the guest allocates) whatever the guest does.
// The first allowance, MEMORY_GROWTH past the low point just after a collection, must hold
// that regrowth, or the worker would collect again and again for nothing: the host sizes it
// from the young generation it asked for (pydeno/host/process/spec.py). But for evals of new code
// it is too wide: on top of what the first collection touches once (about 3 MiB of deno's code
// and of what a long life has loaded), the worker then swung
// up to 3 MiB above the low point, and read more than 5 MiB above where it started for much of
// its life (up to half of the readings with sandbox="off", whose first reading comes before
// deno's asynchronous read path has run; fewer after the sandbox's self-test, which has run
// it). So once NEW_CODE_EVALS evals of new code have run since the last collection, a second
// allowance applies: NEW_CODE_GROWTH past where the worker stood SETTLE_LOOKS looks after that
// collection, when most of the regrowth is behind it. Evals of the same code again and calls
// of functions compile nothing, and keep to the first allowance. The first collection, which
// carries the one-time costs above, waits for MEMORY_GROWTH of growth, so that a runtime that
// evaluates little never pays them.
const MEMORY_LOOK_EVERY = 256; // commands
const MEMORY_GROWTH: number = config.memory_growth ?? 5 * 1048576; // bytes
const NEW_CODE_GROWTH = 256 * 1024; // bytes
const NEW_CODE_EVALS = 256;
const SETTLE_LOOKS = 2;
let commandsToLook = MEMORY_LOOK_EVERY;
let rssFirst = -1; // at the first look
let rssFloor = -1; // after the last collection, or the least seen since
let rssAllowance = MEMORY_GROWTH;
let rssSettled = -1; // SETTLE_LOOKS looks after the last collection
let settledAllowance = NEW_CODE_GROWTH;
let settling = 0; // looks left before rssSettled is taken
let heapFirst = -1; // the live heap the first collection left
let newCode = 0; // evals of code unlike the one before, since the last collection
const LAST_CODE_CHARS = 4096;
let lastCode = "";
// What gc() reads, without a prototype: the guest may have put getters on Object.prototype.
const LAST_RESORT = ObjectCreate(null, {
  type: { __proto__: null, value: "major" } as PropertyDescriptor,
  execution: { __proto__: null, value: "sync" } as PropertyDescriptor,
  flavor: { __proto__: null, value: "last-resort" } as PropertyDescriptor,
});

function lookAtMemory(): void {
  commandsToLook = MEMORY_LOOK_EVERY;
  let rss: number;
  try { rss = memoryUsage().rss; } catch { return; }
  if (rssFirst < 0) rssFirst = rss;
  if (settling > 0 && --settling === 0) rssSettled = rss;
  if (rssFloor < 0 || rss < rssFloor) { rssFloor = rss; return; }
  if (rss - rssFloor <= rssAllowance &&
      (rssSettled < 0 || newCode < NEW_CODE_EVALS || rss - rssSettled <= settledAllowance)) return;
  try {
    if (collectGarbage === undefined) throw new ErrorCtor("no gc");
    collectGarbage(LAST_RESORT);
  } catch {
    rssFloor = rss;
    return;
  }
  collected();
}

function collected(): void {
  newCode = 0;
  rssSettled = -1;
  settling = SETTLE_LOOKS;
  let usage: { rss: number; heapUsed: number };
  try { usage = memoryUsage(); } catch { return; }
  rssFloor = usage.rss;
  const kept = (usage.rss - rssFirst) / 2;
  rssAllowance = kept > MEMORY_GROWTH ? kept : MEMORY_GROWTH;
  if (heapFirst < 0) heapFirst = usage.heapUsed;
  const held = (usage.heapUsed - heapFirst) / 2;
  settledAllowance = held > NEW_CODE_GROWTH ? held : NEW_CODE_GROWTH;
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
  errorStack(stack) {
    try { return guestStack(stack); } catch { return ""; }
  },
});
writer.decodeRatio = config.max_decode_ratio ?? writer.decodeRatio;
config = {} as WorkerSettings;
// Console frames have a writer of their own: a guest getter that logs while a value is being
// converted (a result, a thrown value, a host call's arguments) runs in the middle of the
// main writer's frame, which must not be reset under it. Such a line goes out first, whole.
const consoleWriter = new Writer(MAX_MESSAGE_BYTES, MAX_DEPTH, {
  registerFunction() { throw new CodecError("a console line carries no function"); },
  errorStack() { return ""; },
});
// Whether the main writer holds a frame not yet sent: from beginFrame to flushWriter (or to
// the failure that abandons it).
let framing = false;

function flushWriter(w: Writer = writer): void {
  if (w === writer) framing = false;
  const len = w.pos - FRAME_HEADER_BYTES;
  const b = w.buf;
  b[0] = len >>> 24; b[1] = (len >>> 16) & 0xff; b[2] = (len >>> 8) & 0xff; b[3] = len & 0xff;
  let off = 0;
  const total = w.pos;
  try {
    while (off < total) off += writeSync(U8Subarray(b, off, total));
  } catch {
    // The host closed our stdout: it is gone or has given up on us.
    exit(EXIT_DONE);
  }
}

function beginFrame(kind: number, n: number, w: Writer = writer): void {
  if (w === writer) framing = true;
  w.reset();
  w.pos = FRAME_HEADER_BYTES;
  w.header(0x90, -1, 0xdc, 0xdd, n, 15);
  w.int(kind);
}

// Bounds on the parts of an error report, so that it always fits in a frame: a guest can
// throw an Error whose message is megabytes long.
const ERROR_PART_CHARS = Math.max(64, Math.min(64 * 1024, (MAX_MESSAGE_BYTES >> 3) - 64));

function clip(text: string): string {
  return text.length > ERROR_PART_CHARS
    ? StringSlice(text, 0, ERROR_PART_CHARS) + ` …[${text.length - ERROR_PART_CHARS} more characters]`
    : text;
}

// A thrown value's refusal is cut here: its text comes from the guest's getters too.
const REFUSAL_CHARS = 1024;

/** Answers request id with the error e. A thrown value that is not an Error (e is a guest's,
 * and `thrown` is true) travels whole too, converted like any value under the same limits;
 * one that cannot be (a cycle, a function, a getter that throws, too large) is left out and
 * the message says why. */
function sendError(id: number, e: any, thrown = true): void {
  const d = describe(e);
  const name = clip(d[0]), stack = clip(d[2]);
  let message = clip(d[1]);
  if (thrown && !isErrorValue(e)) {
    try {
      errorFrame(id, name, message, stack);
      writer.header(0x90, -1, 0xdc, 0xdd, 1, 15);
      writer.thrown = true;
      writer.top(e);
      flushWriter();
      return;
    } catch (refusal) {
      let why = describe(refusal)[1];
      if (why.length > REFUSAL_CHARS) why = StringSlice(why, 0, REFUSAL_CHARS) + "…";
      message = `${message} [the thrown value could not be converted: ${why}]`;
    } finally {
      writer.thrown = false;
    }
  }
  errorFrame(id, name, message, stack);
  writer.header(0x90, -1, 0xdc, 0xdd, 0, 15);
  flushWriter();
}

function errorFrame(id: number, name: string, message: string, stack: string): void {
  beginFrame(W_ERROR, 6);
  writer.int(id);
  writer.str(name);
  writer.str(message);
  writer.str(stack);
}

// A long array result goes out in parts, each a run of its items, so that the host decodes
// one part while this worker converts the next: on two cores that overlaps the two halves of
// the conversion. The RESULT frame carries the last run; all of them share one byte budget.
const PARTS_FROM = 4096; // items
const PARTS = 8;
function inParts(value: any): boolean {
  return ArrayIsArray(value) && ObjectGetPrototypeOf(value) === ArrayPrototype && value.length >= PARTS_FROM;
}

function sendResult(id: number, value: any): void {
  const mark = nextFunctionId;
  try {
    if (inParts(value)) {
      sendParts(id, value);
    } else {
      beginFrame(W_RESULT, 3);
      writer.int(id);
      writer.top(value);
    }
  } catch (e) {
    // Handles registered while encoding a value that then failed would never be released.
    for (let i = mark; i < nextFunctionId; i++) delete functions[i];
    const d = describe(e);
    sendError(id, { name: d[0], message: `result could not be converted: ${d[1]}`, stack: "" }, false);
    return;
  }
  flushWriter();
}

/** All but the last run of items in PART frames; the last one is left in the writer as the
 * RESULT frame, for the caller to flush. */
function sendParts(id: number, value: any[]): void {
  const n = value.length;
  const step = MathCeil(n / PARTS);
  let spent = 0, charged = 0;
  try {
    for (let from = 0; ; from += step) {
      const to = from + step < n ? from + step : n;
      beginFrame(to === n ? W_RESULT : W_PART, 3);
      writer.budget(MAX_MESSAGE_BYTES - spent, charged);
      writer.int(id);
      writer.items(value, from, to);
      if (to === n) return;
      spent += writer.pos - FRAME_HEADER_BYTES;
      charged += writer.decodeCost;
      flushWriter();
    }
  } finally {
    writer.budget(MAX_MESSAGE_BYTES);
  }
}

let consoleSent = 0; // characters sent since the current command began

function sendConsole(level: ConsoleLevel, text: string): void {
  // The message that crosses the budget is still sent, so the host sees it was crossed.
  if (consoleSent > MAX_CONSOLE_BYTES) return;
  if (text.length > MAX_CONSOLE_CHARS) {
    text = StringSlice(text, 0, MAX_CONSOLE_CHARS) + ` …[${text.length - MAX_CONSOLE_CHARS} more characters]`;
  }
  consoleSent += text.length;
  beginFrame(W_CONSOLE, 3, consoleWriter);
  consoleWriter.str(level);
  consoleWriter.str(text);
  flushWriter(consoleWriter);
}

/** name, message, stack of a thrown value, read defensively: the guest may have made any of
 * them a throwing getter, and the stack loses the frames that belong to this worker. A thrown
 * string is its own message; any other value with neither a name nor a message reads as
 * console.log shows it (`{ code: 42 }`), not as `[object Object]`. */
function describe(e: any): [string, string, string] {
  let name = "", message = "", stack = "";
  if ((typeof e === "object" && e !== null) || typeof e === "function") {
    let unreadable = false;
    try { name = e.name === undefined ? "" : StringFn(e.name); } catch { name = "Error"; unreadable = true; }
    try { message = e.message === undefined ? "" : StringFn(e.message); } catch { message = ""; unreadable = true; }
    const rewritten = sandboxSays(e, name, message);
    if (rewritten !== null) message = rewritten;
    try { stack = typeof e.stack === "string" ? guestStack(e.stack) : ""; } catch { stack = ""; }
    if (name === "" && message === "") {
      message = rendered(e);
    } else if ((message === "" || unreadable) && !isErrorValue(e)) {
      // Not an Error, and no message to read it by: it reads as what it is.
      name = "";
      message = rendered(e);
    }
  } else if (typeof e === "string") {
    message = e;
  } else {
    message = rendered(e);
  }
  return [name, message, stack];
}

// Deno's own refusals speak of its command-line flags (`run again with the --allow-net flag`,
// `--no-npm is specified`), which nobody running the sandbox can pass. What the host reads is
// the sandbox's account instead, in the exact words the host's kind table matches
// (sandbox_denied, import_refused); the host writes the operator's advice.
// The text of such an error, retold: a guest Worker's error event ("Uncaught (in promise)
// NotCapable: ..."), or a "Name: message" a program made of one to rethrow it.
const RETOLD = /^(?:Uncaught (?:\(in promise\) )?)?([A-Za-z]+): /;
const NO_DENO = "Deno is not defined";
// Where Deno's node: modules reach for the Deno namespace the guest does not have, and what
// the sandbox withholds from each.
const NODE_NEEDS: [RegExp, string][] = [
  [/child_process/, "subprocesses"],
  [/(?:\/|_)fs\b|\bfs\.ts/, "file access"],
  [/_process\/|\bprocess\.ts/, "environment variables"],
  [/\b(?:dns|net|http|https|http2|tls|dgram)\b/, "network access"],
  [/\bos\.ts/, "system information"],
];

/** The sandbox's message for a refusal of Deno's that error e (named name, saying message)
 * reports, or null when it is none. */
function sandboxSays(e: any, name: string, message: string): string | null {
  const text = unresolved(message, name) ?? denied(message);
  if (text !== null) return text;
  const retold = RegExpExec(RETOLD, message);
  if (retold !== null) {
    const own = StringSlice(message, retold[0].length);
    const again = unresolved(own, retold[1]) ?? denied(own) ?? alreadyDenied(own);
    if (again !== null) return again;
  }
  if (name !== "ReferenceError" || message !== NO_DENO) return null;
  let stack = "";
  try { stack = typeof e.stack === "string" ? e.stack : ""; } catch { /* no stack: the guest's own */ }
  // The first frame: the guest's own code, or Deno's (ext:...) acting for it.
  const at = StringIndexOf(stack, "\n    at ");
  const end = at < 0 ? -1 : StringIndexOf(stack, "\n", at + 1);
  const first = at < 0 ? "" : StringSlice(stack, at, end < 0 ? stack.length : end);
  if (!StringIncludes(first, "ext:")) return "no Deno namespace in this sandbox";
  for (let i = 0; i < NODE_NEEDS.length; i++) {
    if (RegExpExec(NODE_NEEDS[i][0], stack) !== null) return `no ${NODE_NEEDS[i][1]} in this sandbox`;
  }
  return "no operating system access in this sandbox";
}

/** A guest Worker's refusal as its error event tells it (the sandbox's words, then maybe
 * ` at <where it was thrown>`): the sandbox's words, or null. */
function alreadyDenied(text: string): string | null {
  if (denied(text, true) !== null) return text;
  const at = StringLastIndexOf(text, " at ");
  return at < 0 ? null : denied(StringSlice(text, 0, at), true);
}

/** A value as console.log shows it, on one line. Deno's inspect shows a Proxy's target
 * without running its traps and a getter as [Getter] without calling it; a custom inspect
 * hook of the guest's may throw, which leaves the plain conversion to a string. */
function rendered(v: any): string {
  try { return inspect(v, { depth: 4, colors: false, compact: true, breakLength: Infinity }); } catch { /* below */ }
  try { return StringFn(v); } catch { return "<unprintable thrown value>"; }
}

/** A stack as the host shows it (of a thrown error, or of an Error value): positions mapped to
 * the code as written, the frames that belong to this worker and Deno's core removed. */
function guestStack(stack: string): string {
  // Module names last too: a TypeScript eval's converted imports name its text (imports.ts).
  stack = mapModuleStack(mapStack(mapModuleStack(stack)));
  // Line by line with indexOf, not split/join: those consult Symbol.split and index
  // setters the guest may have planted.
  let kept = "", any = false, from = 0;
  while (from <= stack.length) {
    let to = StringIndexOf(stack, "\n", from);
    if (to < 0) to = stack.length;
    const line = StringSlice(stack, from, to);
    from = to + 1;
    if (StringIncludes(line, "ext:core/") || StringIncludes(line, WORKER_DIR)) continue;
    kept = any ? kept + "\n" + line : line;
    any = true;
  }
  return kept;
}

// --- Guest-facing globals ----------------------------------------------------------------
function formatArgs(args: any[]): string {
  let out = "";
  for (let i = 0; i < args.length; i++) {
    const a = args[i];
    let s: string;
    try { s = typeof a === "string" ? a : inspect(a, { depth: 4, colors: false }); } catch { s = "<uninspectable>"; }
    out = i === 0 ? s : out + " " + s;
  }
  return out;
}

function consoleMethod(level: ConsoleLevel) {
  return function (...args: any[]) { sendConsole(level, formatArgs(args)); };
}
const guestConsole: any = {};
const CONSOLE_METHODS: [string, ConsoleLevel][] = [
  ["log", "log"], ["info", "info"], ["debug", "debug"], ["warn", "warn"], ["error", "error"],
  ["trace", "debug"], ["dir", "log"], ["table", "log"],
];
for (const [method, level] of CONSOLE_METHODS) guestConsole[method] = consoleMethod(level);
guestConsole.assert = function (cond: any, ...args: any[]) {
  if (!cond) sendConsole("error", "Assertion failed" + (args.length ? ": " + formatArgs(args) : ""));
};
for (const noop of ["group", "groupEnd", "groupCollapsed", "time", "timeEnd", "timeLog", "count", "countReset", "clear"]) {
  guestConsole[noop] = function () {};
}

// Errors thrown from timers and unhandled rejections would end a Deno process; here they
// are reported on the console channel and the worker carries on.
addEventListener("error", (ev: any) => {
  ev.preventDefault();
  const d = describe(ev.error);
  sendConsole("error", `Uncaught ${d[0] ? d[0] + ": " : ""}${d[1]}`);
});
addEventListener("unhandledrejection", (ev: any) => {
  ev.preventDefault();
  const d = describe(ev.reason);
  sendConsole("error", `Uncaught (in promise) ${d[0] ? d[0] + ": " : ""}${d[1]}`);
});

// --- Host calls (bound functions) ----------------------------------------------------------
const pendingCalls: any = ObjectCreate(null); // call id -> [resolve, reject]
let nextCallId = 1;

let outstandingCalls = 0; // abandoned calls count until they finish

function hostCall(name: string, args: any[]): Promise<any> {
  // A getter run while a value is converted: its frame would cut into the one being written.
  // Thrown, not rejected, so that the conversion fails and says why.
  if (framing) throw new TypeErrorCtor("a host function cannot be called while a value is being converted");
  if (outstandingCalls >= MAX_INFLIGHT) {
    return PromiseReject(new ErrorCtor(`more than ${MAX_INFLIGHT} host calls in flight`));
  }
  const id = nextCallId++;
  const mark = nextFunctionId;
  try {
    beginFrame(W_HOSTCALL, 4);
    writer.int(id);
    writer.str(name);
    writer.top(args, -1);
  } catch (e) {
    framing = false;
    for (let i = mark; i < nextFunctionId; i++) delete functions[i];
    return PromiseReject(new TypeErrorCtor(`arguments to ${name}() could not be converted: ${describe(e)[1]}`));
  }
  const p = new PromiseCtor((resolve, reject) => { pendingCalls[id] = [resolve, reject]; });
  outstandingCalls++;
  flushWriter();
  return p;
}
const PromiseReject = Promise.reject.bind(Promise);
const TypeErrorCtor = TypeError;

function bind(name: string): void {
  const fn = { [name]: function (...args: any[]) { return hostCall(name, args); } }[name];
  ObjectDefineProperty(globalThis, name, { __proto__: null, value: fn, writable: true, enumerable: false, configurable: true } as PropertyDescriptor);
}

// --- Index properties on the shared prototypes -----------------------------------------------
// Deno's own JavaScript (its tick queue, timers, promise and op plumbing) reads array holes and
// missing indices the usual way, through Array.prototype and Object.prototype. An index
// property there that throws or answers junk, which a guest can define, breaks Deno itself:
// the next command used to end the whole worker. Array.prototype cannot get one (see where
// its length is made read-only below); for Object.prototype, whenever a command ends and
// whenever the read loop comes round, the worker removes them (and puts Array.prototype back
// on Object.prototype) and says so on the console. When none is there, which is always but
// after such a guest, the check costs one listing of Object.prototype's names. One the guest
// made non-configurable cannot go: the worker then ends once the command is answered, rather
// than fail at random later.
let unremovable = "";
let removed = ""; // what scrubPrototypes removed and tidyPrototypes has yet to report
// Whether guest code may have run since the last tidy: the read loop's own tidy is for code
// run outside a command (ticks, microtasks, timers), and is skipped after commands that
// tidied on their way out and ran nothing of the guest's after.
let untidy = true;

/** Removes the index properties on Object.prototype; safe to call in the middle of a frame. */
function scrubPrototypes(): void {
  if (holesReadUndefined()) return;
  const names = ObjectGetOwnPropertyNames(ObjectPrototype);
  for (let i = 0; i < names.length; i++) {
    const c = StringCharCodeAt(names[i], 0);
    if (!(c >= 0x30 && c <= 0x39)) break; // index names come first
    const what = `Object.prototype[${names[i]}]`;
    if (ReflectDeleteProperty(ObjectPrototype, names[i])) removed = removed === "" ? what : `${removed}, ${what}`;
    else unremovable = what;
  }
  if (ObjectGetPrototypeOf(ArrayPrototype) !== ObjectPrototype) {
    const what = "the prototype given to Array.prototype";
    try {
      ObjectSetPrototypeOf(ArrayPrototype, ObjectPrototype);
      removed = removed === "" ? what : `${removed}, ${what}`;
    } catch {
      unremovable = what;
    }
  }
}

/** scrubPrototypes, and the report of what it removed: only where no frame is being written. */
function tidyPrototypes(): void {
  scrubPrototypes();
  untidy = false;
  if (removed === "") return;
  const what = removed;
  removed = "";
  try {
    sendConsole("warn", `pydeno: removed ${what} (Deno's own code reads missing array items through it)`);
  } catch { /* a console frame cannot fail the command */ }
}

/** Ends the worker if the guest left the prototypes in a state Deno's own code fails in. */
function endIfUnremovable(): void {
  if (unremovable === "") return;
  coreWriteSync(2, coreEncode(
    `${WORKER_PREFIX}the guest made ${unremovable} non-configurable; Deno's own code reads through it\n`,
  ));
  exit(EXIT_INTERNAL);
}

// --- Commands ------------------------------------------------------------------------------
let inflight = 0;

function commandStarts(): void {
  if (inflight === 0) consoleSent = 0;
  inflight++;
  commandsToLook--;
}

function isNativePromise(value: any): boolean {
  // The brand check first: it runs no trap, so a Proxy cannot throw from here.
  return IsPromise(value) && ObjectGetPrototypeOf(value) === PromiseProto;
}

/** Runs one command and answers request id with its value or its error. A value that is
 * not a promise is answered before this returns, without a microtask hop. */
function answer(id: number, run: () => any): void {
  commandStarts();
  let value: any;
  try {
    value = run();
  } catch (e) {
    tidyPrototypes();
    try { sendError(id, e); } finally { inflight--; untidy = true; }
    return;
  }
  tidyPrototypes();
  if (!isNativePromise(value)) {
    try {
      sendResult(id, value);
    } finally {
      inflight--;
      // Converting an object or a function reads it, which can run the guest's getters.
      if ((typeof value === "object" && value !== null) || typeof value === "function") untidy = true;
    }
    return;
  }
  untidy = true;
  void settle(id, value);
}

async function settle(id: number, promise: Promise<any>): Promise<void> {
  let value: any;
  try {
    value = await promise;
  } catch (e) {
    tidyPrototypes();
    try { sendError(id, e); } finally { inflight--; }
    return;
  }
  try {
    tidyPrototypes();
    sendResult(id, value);
  } catch (e) {
    sendError(id, e);
  } finally {
    inflight--;
  }
}

/** Evaluates code as the script named `script`: its value, or a promise of it. */
function evaluate(code: string, script: string): any {
  // Code that awaits is rewritten (see "Top-level await"). So is every eval of a guest that
  // poisoned array iteration or put accessors on indices of Object/Array.prototype: Deno's
  // evalContext wrapper destructures an array it builds with [[Set]], and such a guest would
  // garble its answer; the rewritten route never reads it.
  if (RegExpExec(AWAIT_RE, code) !== null || !classicScriptSafe()) return replEvaluate(code, script);
  // One script name for every plain JavaScript eval: V8's compilation cache, keyed on source
  // and origin, then serves repeated source. New code is what leaves compiled scripts behind
  // (see "Memory over a long life"); only a short source is kept to compare the next with: a
  // long one would stay alive for it.
  if (code !== lastCode) { lastCode = code.length <= LAST_CODE_CHARS ? code : ""; newCode++; }
  const outcome = evalContext(code, script);
  // The same wrapper ran after the guest code: if that code changed what it reads, the
  // outcome may hold something other than the code's value or error.
  if (!classicScriptSafe()) {
    throw new ErrorCtor(
      "the value of this eval was lost: the code replaced array iteration or put an index property on " +
        "Object.prototype or Array.prototype, which Deno's evaluation reads after the code runs " +
        "(its other effects stand; the evals after it are not affected)",
    );
  }
  if (outcome[1] !== null) {
    if (outcome[1].isCompileError === true) {
      return compilePlace(code, script, outcome[1].thrown);
    }
    throw outcome[1].thrown;
  }
  return outcome[0];
}

const SyntaxErrorCtor = SyntaxError;

// --- Top-level await ---------------------------------------------------------------------------
// repl.ts rewrites such an eval into an async arrow function's body. The worker declares what
// it names (vars and functions before it runs, lexical names as they are declared) with small
// classic scripts of its own, and hands values to and from them through one object of its own,
// kept in a script-scope constant with an unguessable name: no property of any object the
// guest can reach, and no result of evalContext, which a poisoned guest could garble.
const SCOPE = "$" + StringSlice(randomHex(), 0, 12);
const NAMES: Names = { completion: SCOPE + "c", bound: SCOPE + "t", declare: SCOPE + "d", functions: SCOPE + "s" };
const HOLDER = SCOPE + "h";
const hold: any = ObjectCreate(null);
hold.f = undefined; // the function a rewritten eval's script made
hold.t = undefined; // the object whose names a declaration script declares
hold.s = undefined; // what a declaration script made: setters
ObjectDefineProperty(hold, "r", { __proto__: null, value: (fn: any) => { hold.f = fn; } } as PropertyDescriptor);
// Handed to the script once, through a global that is gone before any guest code runs.
ObjectDefineProperty(globalThis, HOLDER, { __proto__: null, value: hold, configurable: true } as PropertyDescriptor);
evalContext(`const ${HOLDER} = globalThis.${HOLDER};`, "pydeno:start");
delete (globalThis as any)[HOLDER];
const DECLARE_SCRIPT = "guest:declare";
/** Setters of the script-scope names evals with top-level await declared, by name. */
const setters: { [name: string]: (value: any) => void } = ObjectCreate(null);
/** Names declared as vars (a var stays for good). */
const vars: { [name: string]: true } = ObjectCreate(null);

type Compiled = { rw: Rewrite; fn: any; functions: any; name: string };
/** A rewritten eval's script that did not compile: its text, name and evalContext's outcome. */
type Refused = { text: string; name: string; outcome: [any, any] };
// The latest rewrites and their functions, by code: an eval run again costs no lexing.
// At most CACHE_SIZE codes, and CACHE_CHARS characters of them (a code keeps its rewritten
// body too): then it starts afresh.
const CACHE_SIZE = 64, CACHE_CHARS = 2 << 20;
let cache: { [code: string]: Compiled | Rewrite } = ObjectCreate(null);
let cached = 0, cachedChars = 0;

function remember(code: string, entry: Compiled | Rewrite): void {
  if (cache[code] === undefined) {
    cachedChars += code.length;
    if (++cached > CACHE_SIZE || cachedChars > CACHE_CHARS) {
      cache = ObjectCreate(null);
      cached = 1;
      cachedChars = code.length;
    }
  }
  cache[code] = entry;
}

/** Runs code rewritten (see repl.ts): a promise of its completion value. */
function replEvaluate(code: string, script: string): any {
  const hit = cache[code];
  let compiled: Compiled;
  if (hit !== undefined && ObjectHasOwn(hit, "fn")) compiled = hit as Compiled;
  else {
    const rw = hit === undefined ? rewrite(code, NAMES) : hit as Rewrite;
    if (hit === undefined) remember(code, rw);
    if (rw.error !== null) return refuse(code, script, rw.error, null);
    const made = compile(script, rw);
    if (!ObjectHasOwn(made, "fn")) return refuse(code, script, null, made as Refused);
    compiled = made as Compiled;
    remember(code, compiled);
    if (code !== lastCode) { lastCode = code.length <= LAST_CODE_CHARS ? code : ""; newCode++; }
  }
  const rw = compiled.rw;
  declareVars(rw);
  const bound = ObjectCreate(null);
  const declare = (index: number) => declareNames(rw.lexical[index], bound);
  return ReflectApply(compiled.fn, undefined, [undefined, bound, declare, compiled.functions]);
}

/** The async function of rw's body, made by a classic script named for its edits. */
function compile(script: string, rw: Rewrite): Compiled | Refused {
  // In parentheses: V8 then compiles the function at once, instead of preparsing it now and
  // parsing it again when it is called.
  const head = `${HOLDER}.r((async(${NAMES.completion},${NAMES.bound},${NAMES.declare},${NAMES.functions})=>{`;
  // A list without a prototype, as repl.ts makes its own: no index setter of the guest's.
  const edits: any = ObjectCreate(null);
  edits[0] = { line: 1, column: 1, now: head.length, longer: head.length };
  for (let i = 0; i < rw.edits.length; i++) {
    const e = rw.edits[i];
    edits[i + 1] = e.line === 1 ? { line: 1, column: e.column + head.length, now: e.now, longer: e.longer } : e;
  }
  edits.length = rw.edits.length + 1;
  const text = head + rw.body + `\nreturn ${NAMES.completion}}))`;
  const name = evalName(text, script, edits);
  hold.f = undefined;
  const outcome = evalContext(text, name);
  const fn = hold.f;
  hold.f = undefined;
  if (typeof fn !== "function") return { text, name, outcome };
  return { rw, fn, functions: rw.functions.length > 0 ? functionSetter(rw.functions) : undefined, name };
}

/** Setters of top-level functions' globals, by their names: one script each list. */
const functionSetters: { [names: string]: any } = ObjectCreate(null);

/** What assigns the globals of the functions named (in order) their values. */
function functionSetter(names: string[]): any {
  let key = "", params = "", body = "";
  for (let i = 0; i < names.length; i++) {
    key += (i > 0 ? "," : "") + names[i];
    params += (i > 0 ? "," : "") + "v" + i;
    body += `${names[i]}=v${i};`;
  }
  let setter = functionSetters[key];
  if (setter === undefined) {
    hold.s = undefined;
    evalContext(`${HOLDER}.s=(${params})=>{${body}};`, DECLARE_SCRIPT);
    setter = hold.s;
    hold.s = undefined;
    functionSetters[key] = setter;
  }
  return setter;
}

/** The vars and functions rw names, declared as a script declares them, once each. */
function declareVars(rw: Rewrite): void {
  let list = "";
  for (let i = 0; i < rw.vars.length; i++) {
    const name = rw.vars[i];
    if (vars[name] === true) continue;
    list += (list === "" ? "" : ",") + name;
  }
  if (list === "") return;
  hold.s = undefined;
  const outcome = evalContext(`var ${list};${HOLDER}.s=true;`, DECLARE_SCRIPT);
  const done = hold.s === true;
  hold.s = undefined;
  if (!done) {
    // A let or const of the same name (a script would refuse the two, and so does this).
    if (classicScriptSafe() && outcome[1] !== null) throw outcome[1].thrown;
    throw new SyntaxErrorCtor(`a var in this eval has the name of a let, const or class: ${list}`);
  }
  for (let i = 0; i < rw.vars.length; i++) vars[rw.vars[i]] = true;
}

/** Declares names (a lexical declaration of a rewritten eval, bound on `bound`) as
 * script-scope lets; a name a rewritten eval declared before is assigned instead. */
function declareNames(names: string[], bound: any): void {
  const fresh: { [name: string]: true } = ObjectCreate(null);
  let list = "", made = "", count = 0;
  for (let i = 0; i < names.length; i++) {
    const name = names[i];
    if (setters[name] !== undefined || fresh[name] === true) continue;
    fresh[name] = true;
    list += (count > 0 ? "," : "") + `${name}=${HOLDER}.t.${name}`;
    made += `(v)=>{${name}=v},`;
    count++;
  }
  if (count > 0) {
    const all = declareScript(`let ${list};${HOLDER}.s=[${made}];`, bound);
    if (all !== null) {
      let n = 0;
      for (let i = 0; i < names.length; i++) {
        if (fresh[names[i]] === true && setters[names[i]] === undefined) setters[names[i]] = all[n++];
      }
    } else {
      // One of them has a script-scope binding already, not of this worker's making (a plain
      // eval's let, const or class, or a var or function): as V8's REPL mode does, that one
      // may not be declared again. Each on its own, to find it.
      for (let i = 0; i < names.length; i++) {
        const name = names[i];
        if (fresh[name] !== true || setters[name] !== undefined) continue;
        const one = declareScript(`let ${name}=${HOLDER}.t.${name};${HOLDER}.s=[(v)=>{${name}=v}];`, bound);
        if (one === null) throw new SyntaxErrorCtor(`Identifier '${name}' has already been declared`);
        setters[name] = one[0];
      }
    }
  }
  for (let i = 0; i < names.length; i++) {
    if (fresh[names[i]] !== true) setters[names[i]](bound[names[i]]);
  }
}

/** Runs a declaration script of the worker's; what it made (its setters), or null when it
 * did not run. */
function declareScript(text: string, bound: any): any[] | null {
  hold.t = bound;
  hold.s = undefined;
  evalContext(text, DECLARE_SCRIPT);
  const made = hold.s;
  hold.s = undefined;
  hold.t = undefined;
  return ArrayIsArray(made) ? made : null;
}

/** Throws the error of a rewritten eval that did not compile, or that the rewrite refused
 * (scanned: its message and offset). The code as written, compiled (never run) as an async
 * function's body, says what V8 would say of it, and where; else the rewritten script, placed
 * as written. */
function refuse(code: string, script: string, scanned: [string, number] | null, refused: Refused | null): never | Promise<never> {
  const head = "(async()=>{";
  let place = bodyPlace(head + code + "\n})");
  const end = scriptPosition(head + code, head.length + code.length);
  if (place !== null && (place[1] > end[0] || (place[1] === end[0] && place[2] > end[1]))) {
    // Past the code: a closer the code has no opener for (the rewrite saw which), or the end
    // of its input, as V8 would say of the code alone.
    place = scanned !== null ? null : bodyPlace(head + code) ?? place;
  }
  if (place !== null) {
    return compileRefusal(code, script, place[0], place[1], place[1] === 1 ? place[2] - head.length : place[2]);
  }
  if (scanned !== null) {
    const at = scriptPosition(code, scanned[1]);
    return compileRefusal(code, script, scanned[0], at[0], at[1]);
  }
  // What only a script refuses (new.target at its top level): the rewritten script's place.
  const found = refused === null ? null : scriptPlace(refused.text, refused.name);
  if (found === null) {
    throw refused !== null && classicScriptSafe() && refused.outcome[1] !== null ? refused.outcome[1].thrown
      : new SyntaxErrorCtor("the code did not compile");
  }
  const at = asWritten(refused!.name, found[1], found[2]);
  return compileRefusal(code, script, found[0], at[1], at[2]);
}

/** V8's message and place for source that does not compile as a function body (compiled,
 * never run), or null when it compiles or no place can be had. */
function bodyPlace(source: string): [string, number, number] | null {
  const name = "guest:diagnosis";
  return placeOf(() => {
    const outcome = compileFunction(source, name, undefined, []);
    return outcome[1] === null ? null : outcome[1].thrown;
  }, name);
}

/** The same for text that does not compile as the classic script `name`: compiled again, it
 * fails the same way, and nothing runs. */
function scriptPlace(text: string, name: string): [string, number, number] | null {
  return placeOf(() => {
    const outcome = evalContext(text, name);
    return outcome[1] === null || outcome[1].isCompileError !== true ? null : outcome[1].thrown;
  }, name);
}

/** Throws a SyntaxError at line and column of code (the script `script`); a plain JavaScript
 * eval's also says whether the code is TypeScript (a promise then). */
function compileRefusal(code: string, script: string, message: string, line: number, column: number): never | Promise<never> {
  if (script !== EVAL_SCRIPT) throw compileError(message, script, line, column, "");
  return PromiseThen(isTypeScript(code), (ts: boolean) => {
    throw compileError(message, script, line, column, ts ? TYPESCRIPT_TRAILER : "");
  });
}

// --- Where code that does not compile fails ---------------------------------------------------
// V8 gives a SyntaxError a compilation throws the frames of whoever asked for the compilation,
// not its place; the place is in its message object, which Deno's own error reading falls back
// on when the error has no frame. So, only once a compilation has failed, the same source is
// compiled again with no stack trace captured: it fails the same way, and nothing runs.

/** The message, line and column (from 1) of the SyntaxError run() returns (null: none), in the
 * script `name`; null when it has no such place. */
function placeOf(run: () => any, name: string): [string, number, number] | null {
  const had = ObjectGetOwnPropertyDescriptor(ErrorCtor, "stackTraceLimit");
  if (had === undefined || !ObjectHasOwn(had, "value") || had.writable !== true || had.configurable !== true) return null;
  let thrown: any = null;
  ObjectDefineProperty(ErrorCtor, "stackTraceLimit", { __proto__: null, value: 0, writable: true, enumerable: had.enumerable, configurable: true } as PropertyDescriptor);
  try {
    thrown = run();
  } catch { thrown = null; } finally {
    ObjectDefineProperty(ErrorCtor, "stackTraceLimit", had);
  }
  if (thrown === null) return null;
  try {
    const message = thrown.message;
    const frames = destructureError(thrown).frames;
    if (typeof message !== "string" || !ArrayIsArray(frames) || frames.length !== 1) return null;
    const frame = frames[0];
    if (frame.fileName !== name || typeof frame.lineNumber !== "number" || typeof frame.columnNumber !== "number") return null;
    return [message, frame.lineNumber, frame.columnNumber];
  } catch { return null; }
}

/** Throws the compile error `thrown` of code (a classic script named `script`) at its place; a
 * plain JavaScript eval's also says whether the code is TypeScript (a promise then). */
function compilePlace(code: string, script: string, thrown: any): never | Promise<never> {
  const place = scriptPlace(code, script);
  if (place === null) throw thrown;
  return compileRefusal(code, script, place[0], place[1], place[2]);
}

/** What a JavaScript eval's compile error says after its mark when the code is TypeScript:
 * the host then names the option that evaluates it as such. */
const TYPESCRIPT_TRAILER = "; it compiles as TypeScript";
const AsyncFunctionCtor: any = ObjectGetPrototypeOf(async function () {}).constructor;

/** Whether code, which did not compile as JavaScript, is TypeScript: its types strip (the
 * text changes) and what is left compiles. Compiled as an async function body, which is
 * made and never called. */
async function isTypeScript(code: string): Promise<boolean> {
  try {
    return await withStrip((strip) => {
      const js = stripped(strip, code);
      if (js === code) return false;
      new AsyncFunctionCtor(js);
      return true;
    });
  } catch { return false; }
}

function runEval(id: number, code: string): void {
  answer(id, () => {
    if (!StringIncludes(code, "import")) return evaluate(code, EVAL_SCRIPT);
    // Deno's node: modules read node:process as they load (see loadNodeProcess).
    if (StringIncludes(code, "node:")) loadNodeProcess();
    // Import declarations: declarations from import() (see imports.ts); a literal import()
    // of an added module: rewritten to its URL (see modules.ts).
    const converted = convertImports(code, EVAL_SCRIPT, false);
    if (converted !== null || hasModules()) {
      const run = converted !== null
        ? rewriteEval(stripTypes, converted[0], EVAL_SCRIPT, converted[1])
        : rewriteEval(stripTypes, code, EVAL_SCRIPT);
      if (run[1] !== "") return evaluate(run[0], run[1]);
    }
    return evaluate(code, EVAL_SCRIPT);
  });
}

// Deno's TypeScript transpiler, node:module's stripTypeScriptTypes (see typescript.ts). Loaded
// by the first TypeScript eval: node:module needs node:process (see loadNodeProcess), and the
// two cost a worker that never sees TypeScript some milliseconds of start-up.
let stripTypes: Strip | null = null;

/** run(strip), once Deno's TypeScript transpiler is loaded (a promise the first time). */
function withStrip(run: (strip: Strip) => any): any {
  if (stripTypes !== null) return run(stripTypes);
  loadNodeProcess();
  return PromiseThen(import("node:module"), (m: any) => {
    if (stripTypes === null) {
      const strip = m.stripTypeScriptTypes;
      if (typeof strip !== "function") throw new ErrorCtor("TypeScript is not available in this deno");
      stripTypes = strip;
    }
    return run(stripTypes!);
  });
}

function runEvalTs(id: number, code: string, program = false): void {
  answer(id, () => withStrip((strip) => evaluateTs(strip, code, program)));
}

function runAddModule(id: number, specifier: string, source: string): void {
  answer(id, () => withStrip(() => { addModule(specifier, source); return undefined; }));
}

function runAddPackage(id: number, specifier: string, requires: any, source: string): void {
  answer(id, () => {
    const missing = addPackage(specifier, requires, source);
    if (missing.length === 0) return undefined;
    let chain: Promise<any> | undefined;
    for (let i = 0; i < missing.length; i++) {
      const url = missing[i];
      // Deno's node: modules read node:process as they load (see loadNodeProcess); a
      // package that requires none does not pay for loading it.
      if (StringStartsWith(url, "node:")) loadNodeProcess();
      const load = () => PromiseThen(import(url), (namespace: any) => { loaded(url, namespace); });
      chain = chain === undefined ? load() : PromiseThen(chain, load);
    }
    return PromiseThen(chain!, () => undefined);
  });
}

function runLoadWasm(id: number, name: string, module: Uint8Array): void {
  answer(id, () => {
    if (WasmModule === undefined) {
      throw new ErrorCtor("WebAssembly is not available in this worker: V8 runs jitless (the runtime's jitless=True)");
    }
    const compiled = new WasmModule(module);
    ObjectDefineProperty(globalThis, name, { __proto__: null, value: compiled, writable: true, enumerable: false, configurable: true } as PropertyDescriptor);
    return undefined;
  });
}

function runEvalModule(id: number, source: string): void {
  answer(id, () => withStrip((strip) => PromiseThen(import(programUrl(strip, source)), exportsOf, (e: any) => {
    throw moduleCompileError(e);
  })));
}

/** A TypeScript eval; `program`: a Code Mode program (see H_EVAL_PROGRAM). */
function evaluateTs(strip: Strip, code: string, program: boolean): any {
  // Indexed, not destructured: destructuring runs the array iterator, which the guest may
  // have replaced.
  // Import declarations first, in the TypeScript (see imports.ts): its text is what is
  // stripped, under a name that maps it back when its import lines changed length.
  const converted = convertImports(code, EVAL_SCRIPT, program, true);
  const ts = converted === null ? code : converted[0];
  const shown = converted === null || converted[1].length === 0 ? EVAL_SCRIPT : editedName(ts, EVAL_SCRIPT, converted[1]);
  const js = toJavaScript(strip, ts, shown);
  // Stripped JavaScript has the TypeScript's positions, transformed its own (mapped back to
  // `shown` by typescript.ts).
  const run = js[1] === EVAL_SCRIPT && shown !== EVAL_SCRIPT
    ? rewriteEval(strip, js[0], EVAL_SCRIPT, converted![1])
    : converted !== null || hasModules() ? rewriteEval(strip, js[0], js[1]) : js;
  let value: any;
  try {
    value = evaluate(run[0], run[1] === "" ? js[1] : run[1]);
  } catch (e) {
    throw compileFailure(strip, ts, e, shown);
  }
  if (!isNativePromise(value)) return value;
  return PromiseThen(value, undefined, (e: any) => { throw compileFailure(strip, ts, e, shown); });
}

function runCall(id: number, fnId: number, args: any[]): void {
  answer(id, () => {
    const fn = functions[fnId];
    if (fn === undefined) throw new ErrorCtor("Function has been closed");
    return ReflectApply(fn, undefined, args);
  });
}

const reader = new Reader(new Uint8ArrayCtor(0), 0, 0, MAX_DEPTH, {
  lookupFunction(id: number) {
    const fn = functions[id];
    if (fn === undefined) throw new CodecError("a function handle refers to a function that was closed");
    return fn;
  },
});

function dispatch(buf: Uint8Array, start: number, end: number): void {
  reader.reset(buf, start, end);
  const head = reader.u8();
  if (head < 0x90 || head > 0x9f) throw new ErrorCtor("host frame is not a short array");
  const kind = reader.value(0);
  switch (kind) {
    case H_EVAL: {
      const id = reader.value(0), code = reader.value(0);
      runEval(id, code);
      return;
    }
    case H_EVAL_TS: {
      const id = reader.value(0), code = reader.value(0);
      runEvalTs(id, code);
      return;
    }
    case H_EVAL_PROGRAM: {
      const id = reader.value(0), code = reader.value(0);
      runEvalTs(id, code, true);
      return;
    }
    case H_MODULE: {
      const id = reader.value(0), specifier = reader.value(0), source = reader.value(0);
      runAddModule(id, specifier, source);
      return;
    }
    case H_PACKAGE: {
      const id = reader.value(0), specifier = reader.value(0), requires = reader.value(0), source = reader.value(0);
      runAddPackage(id, specifier, requires, source);
      return;
    }
    case H_WASM: {
      const id = reader.value(0), name = reader.value(0), module = reader.value(0);
      runLoadWasm(id, name, module);
      return;
    }
    case H_EVAL_MODULE: {
      const id = reader.value(0), source = reader.value(0);
      runEvalModule(id, source);
      return;
    }
    case H_CALL: {
      const id = reader.value(0), fnId = reader.value(0);
      let args: any;
      // The argument list is a wrapper: each argument may nest as deep as a result.
      try { args = reader.value(-1); } catch (e) { sendError(id, e); return; }
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
      if (pending !== undefined) {
        delete pendingCalls[callId];
        outstandingCalls--;
      }
      let payload: any, unreadable = false;
      try { payload = reader.value(0); } catch (e) { payload = e; unreadable = true; }
      if (pending === undefined) return;
      // Resolving reads the payload's then, which the guest may have made a getter.
      untidy = true;
      if (unreadable) pending[1](payload);
      else if (ok) pending[0](payload);
      else {
        const err = new ErrorCtor(StringFn(payload[1]));
        ObjectDefineProperty(err, "name", { __proto__: null, value: StringFn(payload[0]), writable: true, configurable: true } as PropertyDescriptor);
        pending[1](err);
      }
      return;
    }
    case H_TERMINATE: {
      // Reaching this frame means guest code is not running (it awaits, or nothing runs):
      // acknowledge, and end the process; the host closes the runtime either way.
      beginFrame(W_TERMINATED, 1);
      flushWriter();
      exit(EXIT_DONE);
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

// --- Stack traces the guest can read --------------------------------------------------------
// A guest function that the worker calls (a getter the codec reads, a toJSON) sees this
// worker's frames in its stack traces, and with them where the host keeps these files: its
// install directory, temporary directory or user id. Every stack trace is made here instead
// of by Deno's default, without those frames: Deno asks Error.prepareStackTrace for one
// whenever a stack is first read, and this accessor always answers with neutralStack, which
// calls the guest's own prepareStackTrace, if it set one, with the frames that remain. A
// frame in a rewritten eval (top-level await, an import, see repl.ts and modules.ts) says where
// the code was written, as the frames the host reads do.
const ErrorToString = uncurry(ErrorCtor.prototype.toString);
// A frame's file is a path where Deno gives one for a file: URL.
const WORKER_PATH = decodeURIComponent(StringSlice(WORKER_DIR, "file://".length));
let guestPrepareStackTrace: any = undefined;
// A frame's methods, taken from the first frames V8 hands over, here: a guest can only hold
// a frame through Error.prepareStackTrace, which is this accessor, so the methods are taken
// before any guest code can reach their prototype. Not at start-up: an Error made while this
// module's top-level code is on the stack has V8 collect the source positions of all of
// that code, a second parse of this whole module in every start.
let CallSiteFileName: (site: any) => any;
let CallSiteToString: (site: any) => string;
let CallSiteLine: (site: any) => number;
let CallSiteColumn: (site: any) => number;
let frameMethodsTaken = false;

function takeFrameMethods(sites: any): void {
  if (frameMethodsTaken || sites.length === 0) return;
  const CallSitePrototype = ObjectGetPrototypeOf(sites[0]);
  CallSiteFileName = uncurry(CallSitePrototype.getFileName);
  CallSiteToString = uncurry(CallSitePrototype.toString);
  CallSiteLine = uncurry(CallSitePrototype.getLineNumber);
  CallSiteColumn = uncurry(CallSitePrototype.getColumnNumber);
  frameMethodsTaken = true;
}

/** A frame as V8 writes it, at its place as written when it is in rewritten code. */
function frameText(site: any): string {
  const text: string = CallSiteToString(site);
  const name = CallSiteFileName(site);
  if (typeof name !== "string" || !isRewritten(name)) return text;
  const line: number = CallSiteLine(site), column: number = CallSiteColumn(site);
  const where = `${name}:${line}:${column}`;
  const at = StringIndexOf(text, where);
  if (at < 0) return text;
  const written = asWritten(name, line, column);
  return StringSlice(text, 0, at) + `${written[0]}:${written[1]}:${written[2]}` + StringSlice(text, at + where.length);
}

function neutralStack(error: any, sites: any): any {
  takeFrameMethods(sites);
  const kept: any = [];
  let n = 0;
  for (let i = 0; i < sites.length; i++) {
    const file = CallSiteFileName(sites[i]);
    if (typeof file === "string" && (StringStartsWith(file, WORKER_DIR) || StringStartsWith(file, WORKER_PATH))) continue;
    ObjectDefineProperty(kept, n++, { __proto__: null, value: sites[i], writable: true, enumerable: true, configurable: true } as PropertyDescriptor);
  }
  if (typeof guestPrepareStackTrace === "function") return ReflectApply(guestPrepareStackTrace, ErrorCtor, [error, kept]);
  let text: string;
  try { text = ErrorToString(error); } catch { text = "Error"; }
  for (let i = 0; i < n; i++) text += `\n    at ${frameText(kept[i])}`;
  return text;
}
ObjectDefineProperty(ErrorCtor, "prepareStackTrace", {
  __proto__: null,
  // Deno hands the frames over in an array it fills by assignment, and panics if that throws,
  // as an index accessor on Object.prototype makes it: those go first (see scrubPrototypes).
  get: () => {
    scrubPrototypes();
    return unremovable === "" ? neutralStack : undefined;
  },
  set: (fn: any) => { guestPrepareStackTrace = fn === neutralStack ? undefined : fn; },
  enumerable: false,
  configurable: false,
} as PropertyDescriptor);
// Deno looks the accessor up on the global Error, which therefore stays this one.
ObjectDefineProperty(globalThis, "Error", { __proto__: null, value: ErrorCtor, writable: false, enumerable: false, configurable: false } as PropertyDescriptor);

// --- Web Workers the guest starts ------------------------------------------------------------
// Deno ends the whole process, not the constructor call, when a Worker is given an unstable
// option (deno.permissions without --unstable-worker-options). So the guest's Worker checks
// its options first, and hands Deno a fresh options object of its own. Every worker starts
// from a data: module that installs the same guard in the worker (it can start workers too)
// before it imports the guest's module. This function runs there from its source text, so it
// uses nothing from this module.
//
// It also takes away, in this isolate and in each worker's before any guest code, what a guest
// could read there without a permission that names where the host keeps its files. On the
// Deno namespace, execPath() answers "deno" and mainModule is undefined (as it is in a worker):
// node:process reads both when it loads (lazily, on first use, always after this), so its
// execPath, argv[0] and title say "deno" too, and argv[1] names no file of the host's; argv0
// is deno's own argv[0], which the host sets to "deno" (pydeno/host/process/spec.py, DENO_ARGV0).
// The originals are kept nowhere, so a guest that deletes or redefines them, or has
// node:process load again, gets nothing better. And the Cache API, which pydeno never lets
// keep anything (see _no_web_storage in pydeno/host/process/staging.py), fails with an error of its own: Deno's
// names the cache directory, with the temporary directory and the host's user id in it.
//
// In a guest's Worker (inWorker), the guard then hides the runtime as the runtime's own isolate
// does at the end of its start-up: no Deno, process or require, and so none of Deno's internals
// (Deno[Deno.internal].core and its ops, Deno.stdin and Deno.stdout among them). Deno's
// node: modules read the Deno global as node:process loads, and fail for good where it is
// missing then; so node:process loads first, from the namespace as neutralised above, before
// any guest code runs in the worker. The worker's own module has no static import, and the
// guest's is imported after this has returned, so nothing of the guest's runs before it.
function guardWorkers(
  global: any,
  source: string,
  emit: ((level: string, text: string) => void) | null,
): (message: string, already?: boolean) => string | null {
  const defineProperty = Object.defineProperty, apply = Reflect.apply;
  const describe = Object.getOwnPropertyDescriptor;
  const denied = guardNetwork(global);
  const deno = global.Deno;
  const inWorker = emit === null;
  // What a worker's console says reaches the host as the runtime's own console output, in
  // order with what the worker posts: it travels to the parent on the worker's own message
  // channel, marked, and the parent's wrapper takes it off before any listener of the guest's.
  // Deno's console in a worker writes to the process's stdout, where the host reads frames.
  const CONSOLE_MARK = "\u0000pydeno:console";
  const isArray = Array.isArray;
  if (inWorker) {
    const post = global.postMessage, inspect = deno.inspect, StrFn = String;
    emit = (level: string, text: string): void => { apply(post, global, [[CONSOLE_MARK, level, text]]); };
    const send = emit;
    const format = (args: any[]): string => {
      let out = "";
      for (let i = 0; i < args.length; i++) {
        const a = args[i];
        let s: string;
        try { s = typeof a === "string" ? a : StrFn(inspect(a, { depth: 4, colors: false })); } catch { s = "<uninspectable>"; }
        out = i === 0 ? s : out + " " + s;
      }
      return out;
    };
    const console: any = {};
    const levels: [string, string][] = [
      ["log", "log"], ["info", "info"], ["debug", "debug"], ["warn", "warn"], ["error", "error"],
      ["trace", "debug"], ["dir", "log"], ["table", "log"],
    ];
    for (const [method, level] of levels) console[method] = (...args: any[]): void => { send(level, format(args)); };
    console.assert = (cond: any, ...args: any[]): void => {
      if (!cond) send("error", "Assertion failed" + (args.length ? ": " + format(args) : ""));
    };
    for (const name of ["group", "groupEnd", "groupCollapsed", "time", "timeEnd", "timeLog", "count", "countReset", "clear"]) {
      console[name] = (): void => {};
    }
    defineProperty(global, "console", { __proto__: null, value: console, writable: true, enumerable: false, configurable: true } as PropertyDescriptor);
  }
  const forward = emit as (level: string, text: string) => void;
  const addListener = EventTarget.prototype.addEventListener;
  const stopImmediate = Event.prototype.stopImmediatePropagation;
  // Runs first on each message a Worker sends: listeners of the guest's are added later. The
  // data is read as the event's own property, which no accessor the guest plants can answer.
  const takeConsole = (event: any): void => {
    const own = describe(event, "data");
    const data = own === undefined ? undefined : own.value;
    if (!isArray(data) || data.length !== 3 || data[0] !== CONSOLE_MARK) return;
    apply(stopImmediate, event, []);
    const level = data[1], text = data[2];
    if (typeof level === "string" && typeof text === "string") forward(level, text);
  };
  const neutral = (name: string, value: unknown): void => {
    const had = deno === undefined || deno === null ? undefined : describe(deno, name);
    if (had === undefined || !had.configurable) return;
    defineProperty(deno, name, { __proto__: null, value, writable: had.writable ?? false, enumerable: had.enumerable, configurable: true } as PropertyDescriptor);
  };
  neutral("execPath", { execPath() { return "deno"; } }.execPath);
  neutral("mainModule", undefined);
  if (inWorker) {
    const nodeProcess = describe(global, "process");
    if (nodeProcess !== undefined && nodeProcess.get !== undefined) apply(nodeProcess.get, global, []);
    const remove = Reflect.deleteProperty;
    // A property that would not go ends the worker's module here, before the guest's loads.
    if (!remove(global, "Deno") || !remove(global, "process") || !remove(global, "require")) {
      throw new TypeError("the Worker could not hide the runtime from its code");
    }
  }
  const caches = describe(global, "caches");
  if (caches !== undefined && caches.configurable) {
    const PromiseReject = Promise.reject.bind(Promise), DOMExceptionCtor = DOMException;
    const refuse = { refuse(): Promise<never> {
      return PromiseReject(new DOMExceptionCtor("the Cache API is not available: nothing is kept", "SecurityError"));
    } }.refuse;
    const storage = Object.freeze({ open: refuse, has: refuse, delete: refuse, keys: refuse, match: refuse });
    defineProperty(global, "caches", { __proto__: null, value: storage, writable: true, enumerable: caches.enumerable, configurable: true } as PropertyDescriptor);
  }
  const found = describe(global, "Worker");
  if (found === undefined) return denied;
  const URLCtor = URL, StringFn = String, TypeErrorCtor = TypeError, JSONStringify = JSON.stringify;
  const encode = encodeURIComponent;
  const prologue = `(${source})(globalThis, ${JSONStringify(source)}, null);\n`;
  const guard = (Original: any): any => {
    function Worker(specifier: any, options?: any): any {
      if (new.target === undefined) {
        throw new TypeErrorCtor("Failed to construct 'Worker': Please use the 'new' operator.");
      }
      const text = typeof specifier === "string" ? specifier : StringFn(specifier);
      let url: string;
      try {
        url = new URLCtor(text).href;
      } catch {
        throw new TypeErrorCtor(`Failed to construct 'Worker': ${JSONStringify(text)} is not an absolute URL`);
      }
      let type = "module", name = "";
      if (options !== undefined && options !== null) {
        if (typeof options !== "object") throw new TypeErrorCtor("Failed to construct 'Worker': options is not an object");
        if (options.deno !== undefined) {
          throw new TypeErrorCtor(
            "Failed to construct 'Worker': the deno option is not supported; a Worker runs with the permissions of the code that starts it",
          );
        }
        const t = options.type, n = options.name;
        if (t !== undefined) type = StringFn(t);
        if (n !== undefined) name = StringFn(n);
      }
      const entry = `${prologue}await import(${JSONStringify(url)});\n`;
      // Without a prototype: Deno reads every option it is handed (deno among them) through it.
      const worker = new Original(`data:text/javascript,${encode(entry)}`, { __proto__: null, type, name });
      apply(addListener, worker, ["message", takeConsole]);
      return worker;
    }
    const proto = Original.prototype;
    defineProperty(Worker, "prototype", { __proto__: null, value: proto } as PropertyDescriptor);
    defineProperty(proto, "constructor", { __proto__: null, value: Worker, writable: true, enumerable: false, configurable: true } as PropertyDescriptor);
    return Worker;
  };
  const settle = (value: any): void => {
    defineProperty(global, "Worker", { __proto__: null, value, writable: true, enumerable: false, configurable: true } as PropertyDescriptor);
  };
  if (found.get === undefined) {
    if (typeof found.value === "function") settle(guard(found.value));
    return denied;
  }
  // Deno loads its Worker class on first use; so does the guard, which keeps start-up short.
  const load = found.get;
  defineProperty(global, "Worker", {
    __proto__: null,
    get() {
      const Worker = guard(apply(load, global, []));
      settle(Worker);
      return Worker;
    },
    set: settle,
    enumerable: false,
    configurable: true,
  } as PropertyDescriptor);
  return denied;

  // Deno's permission checks refuse with its own words, `Requires net access to "host:443",
  // run again with the --allow-net flag`: advice for a deno command line the guest does not
  // have. The sandbox's own account, in the exact words the host's kind table matches
  // (sandbox_denied), is what the guest reads from fetch and WebSocket, here and in its
  // Workers, and what the host reads of any other such refusal. Returned: the translator,
  // which also says whether a message already is one of the sandbox's (already=true).
  function guardNetwork(global: any): (message: string, already?: boolean) => string | null {
    const exec = Function.prototype.call.bind(RegExp.prototype.exec) as (re: RegExp, s: string) => any;
    const then = Function.prototype.call.bind(Promise.prototype.then) as (p: any, ok: any, no: any) => any;
    const construct = Reflect.construct, stringify = JSON.stringify, TypeErrorCtor = TypeError, Str = String;
    const setPrototypeOf = Object.setPrototypeOf;
    const DENO = /^Requires (\w+) access(?: to (.*?))?, (?:run again with|specify)/;
    const OURS = /^no (?:network access|file access|environment variables|subprocesses|system information|native libraries|operating system access|Deno namespace) in this sandbox(?:: "(?:[^"\\\n]|\\.)*" was not (?:reached|read|written|run|loaded))?$/;
    const QUOTED = /^"(?:[^"\\\n]|\\.)*"$/;
    const WHAT: { [permission: string]: [string, string] } = {
      __proto__: null as any,
      net: ["network access", "reached"],
      read: ["file access", "read"],
      write: ["file access", "written"],
      env: ["environment variables", "read"],
      run: ["subprocesses", "run"],
      sys: ["system information", "read"],
      ffi: ["native libraries", "loaded"],
    };
    const translate = (message: string, already?: boolean): string | null => {
      if (already) return exec(OURS, message) === null ? null : message;
      const found = exec(DENO, message);
      if (found === null || found[1] === "import") return null;
      const what = WHAT[found[1]];
      if (what === undefined) return "no operating system access in this sandbox";
      if (found[2] === undefined) return `no ${what[0]} in this sandbox`;
      const target = exec(QUOTED, found[2]) !== null ? found[2] : stringify(found[2]);
      return `no ${what[0]} in this sandbox: ${target} was not ${what[1]}`;
    };
    const indexOf = Function.prototype.call.bind(String.prototype.indexOf) as (s: string, t: string, i?: number) => number;
    const slice = Function.prototype.call.bind(String.prototype.slice) as (s: string, a: number, b?: number) => string;
    // The sandbox's TypeError for an error a network API threw, or the error itself. Its
    // stack is the refused error's, whose frames say where the guest made the call.
    const refusal = (e: any): any => {
      let message = "", stack: any;
      try { message = Str(e.message); stack = e.stack; } catch { return e; }
      const text = translate(message);
      if (text === null) return e;
      const error = new TypeErrorCtor(text);
      if (typeof stack !== "string") return error;
      // Deno's frames and this wrapper's (in a guest Worker, the prologue's data: URL) go.
      let kept = `TypeError: ${text}`;
      for (let from = indexOf(stack, "\n"); from >= 0;) {
        const to = indexOf(stack, "\n", from + 1);
        const line = to < 0 ? slice(stack, from) : slice(stack, from, to);
        if (indexOf(line, "ext:") < 0 && indexOf(line, "data:text/javascript,(function") < 0) kept += line;
        from = to;
      }
      defineProperty(error, "stack", { __proto__: null, value: kept, writable: true, enumerable: false, configurable: true } as PropertyDescriptor);
      return error;
    };
    const nativeFetch = global.fetch;
    if (typeof nativeFetch === "function") {
      // init's default keeps fetch.length at 1, as the native one's.
      const fetch = { fetch(_input: any, _init: any = undefined): Promise<any> {
        return then(apply(nativeFetch, global, arguments), undefined, (e: any) => { throw refusal(e); });
      } }.fetch;
      defineProperty(global, "fetch", { __proto__: null, value: fetch, writable: true, enumerable: true, configurable: true } as PropertyDescriptor);
    }
    const socket = describe(global, "WebSocket");
    if (socket !== undefined && socket.configurable) {
      const wrap = (Native: any): any => {
        if (typeof Native !== "function") return Native;
        function WebSocket(...args: any[]): any {
          if (new.target === undefined) throw new TypeErrorCtor("Failed to construct 'WebSocket': Please use the 'new' operator.");
          try { return construct(Native, args, new.target); } catch (e) { throw refusal(e); }
        }
        defineProperty(WebSocket, "prototype", { __proto__: null, value: Native.prototype } as PropertyDescriptor);
        // Its static members (WebSocket.OPEN, ...) through the native class.
        setPrototypeOf(WebSocket, Native);
        return WebSocket;
      };
      const settle = (value: any): void => {
        defineProperty(global, "WebSocket", { __proto__: null, value, writable: true, enumerable: false, configurable: true } as PropertyDescriptor);
      };
      // Deno may load the class on first use, as it does Worker: wrapped then, not now.
      const load = socket.get;
      if (load === undefined) settle(wrap(socket.value));
      else {
        defineProperty(global, "WebSocket", {
          __proto__: null,
          get() { const value = wrap(apply(load, global, [])); settle(value); return value; },
          set: settle,
          enumerable: false,
          configurable: true,
        } as PropertyDescriptor);
      }
    }
    return translate;
  }
}
const denied = guardWorkers(globalThis, guardWorkers.toString(), (level: string, text: string): void => {
  let known: ConsoleLevel = "log";
  for (const one of CONSOLE_LEVELS) if (one === level) known = one;
  sendConsole(known, text);
});

// --- Hide the runtime from the guest, announce, serve ---------------------------------------
// Array.prototype can hold no index property from here on: with its length read-only, V8
// refuses to define one. Deno's own code, and the codec, read array holes through it.
ObjectDefineProperty(ArrayPrototype, "length", { __proto__: null, writable: false } as PropertyDescriptor);
const g: any = globalThis;
ObjectDefineProperty(g, "console", { __proto__: null, value: guestConsole, writable: true, enumerable: false, configurable: true } as PropertyDescriptor);
delete g.Deno;
delete g.process;
delete g.require;

beginFrame(W_HELLO, 5);
writer.int(PROTOCOL_VERSION);
writer.str(denoVersion);
writer.str(v8Version);
writer.header(0x90, -1, 0xdc, 0xdd, breaches.length, 15);
for (const what of breaches) writer.str(what);
flushWriter();
breaches.length = 0; // they may name host files, and have been told

let rbuf = new Uint8ArrayCtor(1 << 16);
let rcap = 1 << 16;
let rstart = 0, rend = 0;

/** Dispatches every complete frame in the buffer and makes room for the next read. */
function takeFrames(): void {
  while (rend - rstart >= FRAME_HEADER_BYTES) {
    const len = ((rbuf[rstart] << 24) >>> 0) + (rbuf[rstart + 1] << 16) + (rbuf[rstart + 2] << 8) + rbuf[rstart + 3];
    if (rend - rstart - FRAME_HEADER_BYTES < len) {
      if (len + FRAME_HEADER_BYTES > rcap) {
        let size = rcap * 2;
        while (size < len + FRAME_HEADER_BYTES) size *= 2;
        const next = new Uint8ArrayCtor(size);
        U8Set(next, U8Subarray(rbuf, rstart, rend));
        rbuf = next; rcap = size; rend -= rstart; rstart = 0;
      }
      break;
    }
    const start = rstart + FRAME_HEADER_BYTES;
    rstart = start + len;
    dispatch(rbuf, start, start + len);
  }
  if (rstart === rend) { rstart = 0; rend = 0; }
  else if (rcap - rend < 4096) {
    U8Set(rbuf, U8Subarray(rbuf, rstart, rend));
    rend -= rstart; rstart = 0;
  }
}

// The read loop. A synchronous read of stdin is several times faster than Deno's async one
// (which hops to a blocking thread and back), but blocks the whole isolate: it is safe only
// when nothing can happen without input, that is when no microtask is queued and the event
// loop has nothing pending (no timer, no async operation). pump runs as a nextTick callback,
// which Deno calls outside any microtask checkpoint, so draining the queue there really drains
// it, and eventLoopHasMoreWork() then tells the rest. A command waiting on a host call
// waits in the synchronous read too. Otherwise one async read is left pending and, once it
// completes, pump is queued again; the two kinds of read are never mixed, since a pending
// async read would take the bytes a synchronous one waits for.
function pump(): void {
  try {
    for (;;) {
      takeFrames();
      if (untidy) tidyPrototypes();
      endIfUnremovable();
      // Inside a nextTick callback the tick flag is still up and other ticks (node: modules
      // queue them) may wait behind this one: run them, the microtasks and the report of
      // unhandled rejections now, which also lowers the flag.
      drainTicks();
      untidy = true;
      if (commandsToLook <= 0 && inflight === 0) lookAtMemory();
      if (eventLoopHasMoreWork()) {
        readInBackground();
        return;
      }
      const sleepFrom = waitForInput();
      const n = readSync(U8Subarray(rbuf, rend));
      // A sleep in read() that ended within SPIN_MS: the host sends back to back again.
      if (sleepFrom >= 0) polling = nowMs() - sleepFrom < SPIN_MS;
      received(n);
    }
  } catch (e) {
    loopFailed(e);
  }
}

// Polling for input: at most SPIN_MS per wait, and only while it pays. A wait that outlasts
// the poll turns polling off; a sleep in read() that ended within SPIN_MS turns it back on
// (the host is sending back to back again). Polling burns a CPU, so a host that is slow to
// send, or a busy machine, gets a worker that sleeps.
const SPIN_MS = 0.15;
const PREEMPTED_MS = 0.05;
const nowMs: () => number = performance.now.bind(performance);
// Read from stdin so far; the mailbox holds what the host has written.
let stdinBytes = SETTINGS_BYTES;
let polling = true;

/** Returns when stdin has bytes (-1), or when the caller's read() should sleep for them:
 * then the time the wait began, from which the caller judges how long the sleep was. */
function waitForInput(): number {
  if (mailboxCount === null) return -1;
  const start = nowMs();
  if (polling) {
    let last = start, now = start;
    do {
      if (mailboxCount() > stdinBytes) return -1;
      now = nowMs();
      // A look takes a few microseconds; a much longer one means the kernel gave this CPU
      // to someone else meanwhile. The machine is busy: polling only takes CPU from the
      // host (or another worker) that has to send, so sleep instead.
      if (now - last > PREEMPTED_MS) break;
      last = now;
    } while (now - start < SPIN_MS);
    polling = false;
  }
  return start;
}

/** n bytes more in the read buffer; none means the host closed our stdin. */
function received(n: number): void {
  if (n === 0) exit(EXIT_DONE);
  rend += n;
  stdinBytes += n;
}

function readInBackground(): void {
  PromiseThen(readAsync(U8Subarray(rbuf, rend)), (n: number) => {
    received(n);
    try {
      takeFrames();
    } catch (e) {
      loopFailed(e);
    }
    atTick(pump);
  }, loopFailed);
}

function atTick(fn: () => void): void {
  queueNextTick({ callback: fn, args: undefined, snapshot: undefined, asyncId: 0, triggerAsyncId: 0 });
}

function loopFailed(e: any): void {
  // A frame the worker cannot parse means the two ends disagree; the host will see the exit.
  const d = describe(e);
  try { sendConsole("error", `worker loop failed: ${d[0]}: ${d[1]}`); } catch { /* ignore */ }
  exit(EXIT_INTERNAL);
}

atTick(pump);
