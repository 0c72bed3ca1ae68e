// The worker's half of the value codec: msgpack with pydeno's extension types.
//
// Guest code runs in this same isolate and may poison any prototype after we start, so
// every intrinsic the codec touches is captured here, at module evaluation, before the
// first guest command. Methods are "uncurried" (bound to Function.prototype.call) so a
// later change to, say, Uint8Array.prototype.subarray cannot change how we encode.

// deno-lint-ignore-file no-explicit-any
import {
  DECODE_FLOOR,
  DEFAULT_DECODE_RATIO,
  EXT_BIGINT,
  EXT_DATE,
  EXT_ERROR,
  EXT_FUNCTION,
  EXT_JSON,
  EXT_SET,
  EXT_UNDEFINED,
  FRAME_HEADER_BYTES,
  MAX_COST_PER_BYTE,
} from "./protocol.ts";
import { uncurry } from "./intrinsics.ts";


const ObjectKeys = Object.keys;
const ObjectIs = Object.is;
const ObjectGetPrototypeOf = Object.getPrototypeOf;
const ObjectDefineProperty = Object.defineProperty;
const ObjectGetOwnPropertyDescriptor = Object.getOwnPropertyDescriptor;
const ObjectGetOwnPropertyNames = Object.getOwnPropertyNames;
const ObjectHasOwn = Object.hasOwn;
const ArrayIsArray = Array.isArray;
const NumberIsInteger = Number.isInteger;
const NumberIsSafeInteger = Number.isSafeInteger;
const BigIntFn = BigInt;
const MathFloor = Math.floor;
const DateGetTime = uncurry(Date.prototype.getTime);
const BigIntToString = uncurry(BigInt.prototype.toString);
const StringCharCodeAt = uncurry(String.prototype.charCodeAt);
const U8Subarray = uncurry(Uint8Array.prototype.subarray);
const U8Set = uncurry(Uint8Array.prototype.set);
const U8Slice = uncurry(Uint8Array.prototype.slice);
const TypedArrayProto = ObjectGetPrototypeOf(Uint8Array.prototype);
const TypedArrayLength = uncurry(
  Object.getOwnPropertyDescriptor(TypedArrayProto, "length")!.get as () => number,
);
const TypedArrayTag = uncurry(
  Object.getOwnPropertyDescriptor(TypedArrayProto, Symbol.toStringTag)!.get as () => string | undefined,
);
const ArrayBufferIsView = ArrayBuffer.isView;
const MapForEach = uncurry(Map.prototype.forEach);
const MapSize = uncurry(Object.getOwnPropertyDescriptor(Map.prototype, "size")!.get as () => number);
const MapSet = uncurry(Map.prototype.set);
const MapGet = uncurry(Map.prototype.get);
const SetForEach = uncurry(Set.prototype.forEach);
const SetSize = uncurry(Object.getOwnPropertyDescriptor(Set.prototype, "size")!.get as () => number);
const SetAdd = uncurry(Set.prototype.add);
const MapCtor = Map;
const ArrayCtor = Array;
const SetCtor = Set;
const DateCtor = Date;
const Uint8ArrayCtor = Uint8Array;
const DataViewCtor = DataView;
const DVSetFloat64 = uncurry(DataView.prototype.setFloat64);
const DVGetFloat64 = uncurry(DataView.prototype.getFloat64);
const DVGetFloat32 = uncurry(DataView.prototype.getFloat32);
const DVGetBigInt64 = uncurry(DataView.prototype.getBigInt64);
const DVGetBigUint64 = uncurry(DataView.prototype.getBigUint64);
const DVSetUint32 = uncurry(DataView.prototype.setUint32);
const DVSetInt32 = uncurry(DataView.prototype.setInt32);
const DVGetUint16 = uncurry(DataView.prototype.getUint16);
const DVGetUint32 = uncurry(DataView.prototype.getUint32);
const DVGetInt8 = uncurry(DataView.prototype.getInt8);
const DVGetInt16 = uncurry(DataView.prototype.getInt16);
const DVGetInt32 = uncurry(DataView.prototype.getInt32);
const ObjectCreate = Object.create;
const StringFromCharCode = String.fromCharCode;
const ArrayLength = (a: any[]): number => a.length;
const ArrayBufferOf = uncurry(
  Object.getOwnPropertyDescriptor(TypedArrayProto, "buffer")!.get as () => ArrayBuffer,
);
const NumberFn = Number;
// V8's own brand checks, through Deno's core: exact, and no exception per plain object
// (a try/catch brand check costs microseconds each in jitless mode).
const denoCore = (globalThis as any).Deno[(globalThis as any).Deno.internal].core;
const IsMap: (v: any) => boolean = denoCore.isMap;
const IsSet: (v: any) => boolean = denoCore.isSet;
const IsDate: (v: any) => boolean = denoCore.isDate;
const IsAnyArrayBuffer: (v: any) => boolean = denoCore.isAnyArrayBuffer;
const IsPromise: (v: any) => boolean = denoCore.isPromise;
const ObjectPrototype = Object.prototype;
const ArrayPrototype = Array.prototype;
const JSONStringify = JSON.stringify;
const JSONParse = JSON.parse;
const MAX_SAFE = Number.MAX_SAFE_INTEGER;
const encoder = new TextEncoder();
const decoder = new TextDecoder("utf-8", { fatal: false, ignoreBOM: true });
const encodeInto = uncurry(TextEncoder.prototype.encodeInto);
const decodeUtf8 = uncurry(TextDecoder.prototype.decode);
const ErrorCtor = Error;
const TypeErrorCtor = TypeError;
const RangeErrorCtor = RangeError;
const ReflectApply = Reflect.apply;
const ReflectConstruct = Reflect.construct;
const FunctionToString = uncurry(Function.prototype.toString);
const StringIndexOf = uncurry(String.prototype.indexOf);
const StringEndsWith = uncurry(String.prototype.endsWith);
const EMPTY: any[] = [];

// -- Objects whose state the rule of own enumerable keys would lose ------------------------------
// V8's brands, none of which a prototype can fake or hide, and none of which throws: an Error
// ([[ErrorData]]) crosses faithfully; the others are refused.
const IsError: (v: any) => boolean = (ErrorCtor as any).isError ?? denoCore.isNativeError;
/** Whether v is a real Error (V8's brand): it crosses as one, never as a thrown value. */
export const isErrorValue: (v: any) => boolean = IsError;
const IsWeakMap: (v: any) => boolean = denoCore.isWeakMap;
const IsWeakSet: (v: any) => boolean = denoCore.isWeakSet;
const IsRegExp: (v: any) => boolean = denoCore.isRegExp;
const IsBoxedPrimitive: (v: any) => boolean = denoCore.isBoxedPrimitive;
const IsStringObject: (v: any) => boolean = denoCore.isStringObject;
const IsNumberObject: (v: any) => boolean = denoCore.isNumberObject;
const IsBooleanObject: (v: any) => boolean = denoCore.isBooleanObject;
const IsBigIntObject: (v: any) => boolean = denoCore.isBigIntObject;
const IsGeneratorObject: (v: any) => boolean = denoCore.isGeneratorObject;
const IsMapIterator: (v: any) => boolean = denoCore.isMapIterator;
const IsSetIterator: (v: any) => boolean = denoCore.isSetIterator;

// The built-in classes by the prototype their instances inherit from, named: the global ones,
// Intl's and WebAssembly's, and the iterators'. Deno defines many of its web classes (Headers,
// Response, TextEncoder...) lazily, behind a getter on globalThis: calling them all would load
// their code into every worker, so their getters are kept, by name, and a class is looked up
// only when an object whose constructor has its name comes to be converted (resolveLazy).
const BUILTINS = new MapCtor();
const LAZY: any = ObjectCreate(null);
// The native error classes by name, and their prototypes' names as they were at the start.
const ERROR_CTORS: any = ObjectCreate(null);
const ERROR_NAMES = new MapCtor();

function noteClass(f: any, name: string): void {
  if (typeof f !== "function") return;
  const d = ObjectGetOwnPropertyDescriptor(f, "prototype");
  if (d === undefined || !ObjectHasOwn(d, "value")) return;
  const proto = d.value;
  if (typeof proto !== "object" || proto === null || proto === ObjectPrototype) return;
  if (MapGet(BUILTINS, proto) === undefined) MapSet(BUILTINS, proto, name);
}

// Namespaces, not classes, that V8 builds on first touch: reading Temporal's property alone
// builds all of Temporal (a millisecond of every start). Its classes' instances are refused
// all the same, by their constructors' native source (classRefusal).
const UNTOUCHED = "Temporal";

function noteClasses(ns: any, prefix: string, lazy: boolean): void {
  const names = ObjectGetOwnPropertyNames(ns);
  for (let i = 0; i < names.length; i++) {
    const name = names[i];
    const c = StringCharCodeAt(name, 0);
    if (c < 0x41 || c > 0x5a) continue; // a class's name starts with a capital
    if (ns === globalThis && name === UNTOUCHED) continue;
    const d = ObjectGetOwnPropertyDescriptor(ns, name)!;
    if (ObjectHasOwn(d, "value")) noteClass(d.value, prefix + name);
    else if (lazy && typeof d.get === "function") LAZY[name] = d.get;
  }
}

noteClasses(globalThis, "", true);
// Neither namespace is there in every configuration (jitless V8 has no WebAssembly).
if (typeof (globalThis as any).Intl === "object") noteClasses((globalThis as any).Intl, "Intl.", false);
if (typeof (globalThis as any).WebAssembly === "object") noteClasses((globalThis as any).WebAssembly, "WebAssembly.", false);
{
  const asyncGenerator = ObjectGetPrototypeOf((async function* () {}).prototype);
  MapSet(BUILTINS, ObjectGetPrototypeOf(asyncGenerator), "AsyncIterator");
  MapSet(BUILTINS, TypedArrayProto, "TypedArray");
  const errors = [
    ErrorCtor, TypeErrorCtor, RangeErrorCtor, ReferenceError, SyntaxError, EvalError, URIError,
    AggregateError, (globalThis as any).SuppressedError,
  ];
  for (let i = 0; i < errors.length; i++) {
    const ctor = errors[i];
    if (typeof ctor !== "function") continue;
    const name = ctor.prototype.name;
    ERROR_CTORS[name] = ctor;
    MapSet(ERROR_NAMES, ctor.prototype, name);
  }
}

/** Makes the lazily defined global class named name known to BUILTINS, once. */
function resolveLazy(name: string): void {
  const get = LAZY[name];
  LAZY[name] = undefined;
  let cls: any;
  try { cls = ReflectApply(get, globalThis, EMPTY); } catch { return; }
  noteClass(cls, name);
}

/** The name of a function, from its own data property, or "". */
function ownName(f: any): string {
  const d = ObjectGetOwnPropertyDescriptor(f, "name");
  return d !== undefined && ObjectHasOwn(d, "value") && typeof d.value === "string" ? d.value : "";
}

/** Why v, an object of one of V8's brands that cannot cross, is refused; or null. */
function brandRefusal(v: any): string | null {
  if (IsWeakMap(v)) return "is a WeakMap, whose entries cannot be listed; send a Map";
  if (IsWeakSet(v)) return "is a WeakSet, whose items cannot be listed; send a Set";
  if (IsRegExp(v)) return "is a RegExp; send its source and flags as strings";
  if (IsBoxedPrimitive(v)) {
    const what = IsStringObject(v) ? "String" : IsNumberObject(v) ? "Number" : IsBooleanObject(v) ? "Boolean"
      : IsBigIntObject(v) ? "BigInt" : "";
    return what === ""
      ? "is a Symbol object, and symbols cannot be converted"
      : `is a ${what} object (a wrapper); send the primitive ${what === "BigInt" ? "BigInt" : what.toLowerCase()} instead`;
  }
  if (IsGeneratorObject(v)) return "is a generator; collect its items into an Array first";
  if (IsMapIterator(v) || IsSetIterator(v)) return "is an iterator; collect its items into an Array first";
  return null;
}

/** Why an object that inherits from proto is refused, or null when its own enumerable keys
 * are all it holds: proto and what it inherits from, up to Object.prototype, are looked at
 * for a built-in class (by the prototype itself) and for the class each one's own
 * "constructor" names, by its source: a built-in one, or a class that declares private
 * members ("#" in its source), whose state reflection cannot read. A prototype's
 * "constructor" is the guest's to change: one that lies only gets its own value refused, or
 * converted by its own keys, as {...value} would be. */
function classRefusal(proto: any): string | null {
  for (let p = proto; p !== null && p !== ObjectPrototype; p = ObjectGetPrototypeOf(p)) {
    let builtin = MapGet(BUILTINS, p);
    const d = ObjectGetOwnPropertyDescriptor(p, "constructor");
    const ctor = d !== undefined && ObjectHasOwn(d, "value") && typeof d.value === "function" ? d.value : undefined;
    const name = ctor === undefined ? "" : ownName(ctor);
    if (builtin === undefined && name !== "" && LAZY[name] !== undefined) {
      resolveLazy(name);
      builtin = MapGet(BUILTINS, p);
    }
    if (builtin !== undefined) return builtinRefusal(builtin);
    if (ctor === undefined) continue;
    const source = FunctionToString(ctor);
    if (StringEndsWith(source, "{ [native code] }")) {
      const what = name === "" ? "a built-in class" : `${name}, a built-in class`;
      return `is an instance of ${what} whose state cannot be read; send plain data instead`;
    }
    if (StringIndexOf(source, "#") >= 0) {
      return `is an instance of class ${name || "(anonymous)"}, which has private fields that cannot cross; return a plain object`;
    }
  }
  return null;
}

function builtinRefusal(name: string): string {
  if (name === "WeakRef") return "is a WeakRef; send what its deref() returns";
  if (name === "FinalizationRegistry") return "is a FinalizationRegistry, which cannot be converted";
  if (name === "Iterator" || name === "AsyncIterator") return "is an iterator; collect its items into an Array first";
  if (ERROR_CTORS[name] !== undefined) return `inherits from ${name}.prototype but is not an Error; make it with new ${name}()`;
  return `is an instance of ${name}, a built-in class whose state cannot be read; send plain data instead`;
}

// What an Error property reads as when the Error does not have it.
const ABSENT: any = ObjectCreate(null);
// The properties of an Error that cross as its own parts, not among its other properties.
const ERROR_PARTS: any = ObjectCreate(null);
ERROR_PARTS.name = ERROR_PARTS.message = ERROR_PARTS.stack = ERROR_PARTS.cause = ERROR_PARTS.errors = true;
const ERROR_TEXTS = ["name", "message", "stack"];

/** What a property descriptor of the object v holds: its value, or what its getter returns. */
function described(d: PropertyDescriptor, v: any): any {
  if (ObjectHasOwn(d, "value")) return d.value;
  const get = d.get;
  return get === undefined ? undefined : ReflectApply(get, v, EMPTY);
}

/** The own property key of the Error v, read once: from c, the copy of its own enumerable
 * properties, else from its descriptor; ABSENT if it has none. */
function ownPart(v: any, c: any, key: string): any {
  if (ObjectHasOwn(c, key)) return c[key];
  const d = ObjectGetOwnPropertyDescriptor(v, key);
  return d === undefined ? ABSENT : described(d, v);
}

/** The name, message or stack the Error v inherits: from the first prototype that has it, where
 * a native error class's prototype answers with what it held when the worker started (its
 * name, or "" for the others), so that a getter the guest put there never runs and changes
 * nothing. Object.prototype is not read. */
function inheritedPart(v: any, key: string): any {
  for (let p = ObjectGetPrototypeOf(v); p !== null && p !== ObjectPrototype; p = ObjectGetPrototypeOf(p)) {
    const native = MapGet(ERROR_NAMES, p);
    if (native !== undefined) return key === "name" ? native : "";
    const d = ObjectGetOwnPropertyDescriptor(p, key);
    if (d !== undefined) return described(d, v);
  }
  return undefined;
}


// The range of Python's datetime (years 1 to 9999), in ms since the epoch.
const MIN_DATE_MS = -62135596800000;
const MAX_DATE_MS = 253402300799999;
const SAFE_BIGINT_MAX = BigIntFn(Number.MAX_SAFE_INTEGER);
const SAFE_BIGINT_MIN = -SAFE_BIGINT_MAX;

/** Raised for a value the codec refuses; the message names what and where. */
export class CodecError extends TypeErrorCtor {}
ObjectDefineProperty(CodecError.prototype, "name", { __proto__: null, value: "TypeError" } as PropertyDescriptor);

export interface EncodeHooks {
  /** Registers a guest function and returns its handle id. */
  registerFunction(fn: (...args: any[]) => any): number;
  /** An Error's stack as the host shows it: the worker's own frames removed, positions mapped. */
  errorStack(stack: string): string;
}

// Where in a value an error happened, rendered from the writer's key stack only on error.
function renderPath(keys: any, depth: number): string {
  let out = "";
  for (let i = 0; i < depth; i++) {
    const k = keys[i];
    out += typeof k === "number" ? `[${k}]` : typeof k === "string" ? `.${k}` : "<item>";
  }
  return out === "" ? "the value" : `value${out}`;
}

/** A growable msgpack writer; one instance is reused for every outgoing frame. */
export class Writer {
  buf: Uint8Array;
  view: DataView;
  // Tracked here rather than read from buf.length: that getter lives on a prototype.
  cap: number;
  pos = 0;
  maxBytes: number;
  // The position in buf that the frame may not extend past: maxBytes after the prefix.
  limit: number;
  maxDepth: number;
  hooks: EncodeHooks;
  // Whether holes read as undefined in the value being encoded: -1 until an array asks.
  private holes = -1;
  // Null-prototype so a setter the guest puts on Array.prototype cannot intercept them.
  private stack: any = ObjectCreate(null);
  private keys: any = ObjectCreate(null);
  // classRefusal's answers for the value being encoded, by prototype; made on first use.
  private verdicts: any = null;
  // Set while a thrown value is encoded: it carries no function, whose handle would keep a
  // guest function alive for as long as the host keeps the exception (and could not be pickled).
  thrown = false;

  constructor(maxBytes: number, maxDepth: number, hooks: EncodeHooks) {
    this.cap = 1 << 16;
    this.buf = new Uint8ArrayCtor(this.cap);
    this.view = new DataViewCtor(ArrayBufferOf(this.buf));
    this.maxBytes = maxBytes;
    this.limit = maxBytes + FRAME_HEADER_BYTES;
    this.maxDepth = maxDepth;
    this.hooks = hooks;
  }

  reset(): void {
    this.pos = 0;
  }

  /** Payload bytes the next frames may take, at most maxBytes: a value sent in parts shares
   * one budget among them. */
  budget(bytes: number, charged = 0): void {
    this.limit = bytes + FRAME_HEADER_BYTES;
    this.charged = charged;
  }

  // The decode budget (pydeno/host/wire/budget.py): the host refuses a frame whose decoding would take
  // more than decodeRatio bytes of its memory per byte, plus DECODE_FLOOR; the parts of a
  // value share one allowance, so charged is what the earlier ones took (see budget()).
  decodeRatio = DEFAULT_DECODE_RATIO;
  charged = 0;
  // What the host charges for decoding the frame written last, once top() or items() ends.
  decodeCost = 0;

  /** Refuses the frame written if the host would: it charges the same, from the same bytes,
   * and for a part of a value in parts the growth of the list the parts join into. */
  checkDecodeCost(join = 0): void {
    const bytes = this.pos - FRAME_HEADER_BYTES;
    const before = this.maxBytes + FRAME_HEADER_BYTES - this.limit;
    const allowance = this.decodeRatio * (before + bytes) + DECODE_FLOOR - this.charged;
    let cost = bytes * MAX_COST_PER_BYTE;
    if (cost + joinCost(bytes) > allowance) {
      cost = frameCost(this.buf, this.view, FRAME_HEADER_BYTES, this.pos);
    }
    cost += join;
    if (cost > allowance) {
      throw new RangeErrorCtor(
        `value would take about ${cost} bytes of host memory to decode, over the ${allowance} its ` +
          `${before + bytes} bytes allow (max_decode_ratio=${this.decodeRatio} per byte, plus ${DECODE_FLOOR}): ` +
          "raise max_decode_ratio= for a value of many tiny containers or numbers",
      );
    }
    this.decodeCost = cost;
  }

  /** The bytes written since reset(), as a view (valid until the next write). */
  bytes(): Uint8Array {
    return U8Subarray(this.buf, 0, this.pos);
  }

  /** Refuses a frame whose payload (everything after the 4-byte length prefix the caller
   * reserves at the start of buf) would exceed maxBytes: the host kills a worker that sends
   * one, so the limit is enforced here, on bytes actually written (see room() and top()). */
  tooLarge(): Error {
    return new RangeErrorCtor(`value is larger than max_message_bytes=${this.maxBytes} when encoded`);
  }

  /** How many more payload bytes fit under maxBytes. */
  room(): number {
    return this.limit - this.pos;
  }

  ensure(n: number): void {
    const need = this.pos + n;
    if (need <= this.cap) return;
    // Fixed-size reservations may overshoot what is written by a few bytes; the exact check
    // is on what was written. Only refuse here what cannot fit whatever is written.
    if (need > this.limit + 64) throw this.tooLarge();
    let size = this.cap * 2;
    while (size < need) size *= 2;
    const next = new Uint8ArrayCtor(size);
    U8Set(next, U8Subarray(this.buf, 0, this.pos));
    this.buf = next;
    this.cap = size;
    this.view = new DataViewCtor(ArrayBufferOf(next));
  }

  u8(b: number): void {
    this.ensure(1);
    this.buf[this.pos++] = b;
  }

  header(small: number, b8: number, b16: number, b32: number, n: number, fixMax: number): void {
    this.ensure(5);
    const buf = this.buf;
    let p = this.pos;
    if (n <= fixMax && small >= 0) buf[p++] = small | n;
    else if (n < 0x100 && b8 >= 0) { buf[p++] = b8; buf[p++] = n; }
    else if (n < 0x10000) { buf[p++] = b16; buf[p++] = n >>> 8; buf[p++] = n & 0xff; }
    else {
      buf[p++] = b32;
      buf[p++] = n >>> 24; buf[p++] = (n >>> 16) & 0xff; buf[p++] = (n >>> 8) & 0xff; buf[p++] = n & 0xff;
    }
    this.pos = p;
  }

  int(n: number): void {
    this.ensure(9);
    const buf = this.buf;
    if (n >= 0) {
      if (n < 0x80) { buf[this.pos++] = n; return; }
      if (n < 0x100) { buf[this.pos++] = 0xcc; buf[this.pos++] = n; return; }
      if (n < 0x10000) { this.header(-1, -1, 0xcd, 0xce, n, 0); return; }
      if (n < 0x100000000) { this.header(-1, -1, -1, 0xce, n, 0); return; }
      buf[this.pos++] = 0xcf;
      const hi = MathFloor(n / 0x100000000), lo = n >>> 0;
      DVSetUint32(this.view, this.pos, hi); DVSetUint32(this.view, this.pos + 4, lo);
      this.pos += 8;
      return;
    }
    if (n >= -32) { buf[this.pos++] = n & 0xff; return; }
    // Negative integers beyond fixint: int64 is simplest and always correct.
    buf[this.pos++] = 0xd3;
    const hi = MathFloor(n / 0x100000000), lo = (n - hi * 0x100000000) >>> 0;
    DVSetInt32(this.view, this.pos, hi); DVSetUint32(this.view, this.pos + 4, lo);
    this.pos += 8;
  }

  float(n: number): void {
    this.ensure(9);
    this.buf[this.pos++] = 0xcb;
    DVSetFloat64(this.view, this.pos, n);
    this.pos += 8;
  }

  str(s: string): void {
    const len = s.length;
    // The header is chosen from the space reserved, the worst case (3 bytes per UTF-16 unit)
    // so the bytes can be written in place; msgpack allows a wider header than the minimum.
    // The reservation is capped at the room left under max_message_bytes, so a string that
    // fits is never refused for its worst case; one that does not fit is not fully read.
    let space = len * 3;
    const room = this.limit - 5 - this.pos; // room() less the widest header
    if (space > room) {
      if (len > room) throw this.tooLarge(); // every UTF-16 unit takes at least one byte
      space = room;
    }
    const hdr = space < 32 ? 1 : space < 0x100 ? 2 : space < 0x10000 ? 3 : 5;
    this.ensure(hdr + space);
    const start = this.pos + hdr;
    let n = -1;
    if (len < 16) {
      // Short strings: a plain loop beats the native call's fixed cost when ASCII.
      const buf = this.buf;
      let p = start, i = 0;
      for (; i < len; i++) {
        const c = StringCharCodeAt(s, i);
        if (c >= 0x80) break;
        buf[p++] = c;
      }
      if (i === len) n = p - start;
    }
    if (n < 0) {
      const r = encodeInto(encoder, s, U8Subarray(this.buf, start, start + space));
      if (r.read !== len) throw this.tooLarge();
      n = r.written!;
    }
    const buf = this.buf;
    const p = this.pos;
    if (hdr === 1) buf[p] = 0xa0 | n;
    else if (hdr === 2) { buf[p] = 0xd9; buf[p + 1] = n; }
    else if (hdr === 3) { buf[p] = 0xda; buf[p + 1] = n >>> 8; buf[p + 2] = n & 0xff; }
    else { buf[p] = 0xdb; DVSetUint32(this.view, p + 1, n); }
    this.pos = start + n;
  }

  /** UTF-8 of s into buf[start, end); the byte count, or tooLarge() if it does not fit. */
  encodeAll(s: string, start: number, end: number): number {
    const r = encodeInto(encoder, s, U8Subarray(this.buf, start, end));
    if (r.read !== s.length) throw this.tooLarge();
    return r.written!;
  }

  bin(b: Uint8Array): void {
    const n = TypedArrayLength(b);
    this.header(-1, 0xc4, 0xc5, 0xc6, n, 0);
    this.ensure(n);
    U8Set(this.buf, b, this.pos);
    this.pos += n;
  }

  ext(type: number, payload: Uint8Array | null, len: number): void {
    // fixext for 1/2/4/8/16, else ext8/16/32.
    this.ensure(6 + len);
    const buf = this.buf;
    if (len === 1) buf[this.pos++] = 0xd4;
    else if (len === 2) buf[this.pos++] = 0xd5;
    else if (len === 4) buf[this.pos++] = 0xd6;
    else if (len === 8) buf[this.pos++] = 0xd7;
    else if (len === 16) buf[this.pos++] = 0xd8;
    else this.header(-1, 0xc7, 0xc8, 0xc9, len, 0);
    buf[this.pos++] = type;
    if (payload !== null) { U8Set(buf, payload, this.pos); this.pos += len; }
  }

  where(depth: number): string {
    return renderPath(this.keys, depth);
  }

  /** Encodes a whole value: plain JSON-shaped data goes through V8's native JSON.stringify
   * (several times faster than encoding in JavaScript when V8 runs jitless), as an
   * EXT_JSON payload of a copy made by jsonCopy; anything JSON would not carry exactly goes
   * through value(). */
  top(v: any, depth = 0): void {
    jsonLists = jsonDicts = 0;
    this.verdicts = null;
    if (typeof v === "object" && v !== null) {
      const copy = jsonCopy(v, depth, this.maxDepth);
      // Checked after the copy, whose getters may have changed the prototypes: the state
      // JSON.stringify meets, and (but for a getter that undid its own change) the one the
      // copy was read in.
      if (copy !== NOT_JSON && jsonSafe()) {
        this.json(JSONStringify(copy));
        this.checkDecodeCost();
        return;
      }
    }
    this.holes = -1;
    this.value(v, depth);
    this.settled();
    this.checkDecodeCost();
  }

  /** Encodes items from..to of the array v (at depth 0) as an array of their own, as top()
   * would encode them inside v: the same lane rules, v itself on the stack for the cycle
   * check, and paths in errors that name each item's index in v. */
  items(v: any[], from: number, to: number): void {
    // The run's own array counts: copyItems counts only what it holds.
    jsonLists = 1;
    jsonDicts = 0;
    this.verdicts = null;
    const copy = copyItems(v, from, to, 0, this.maxDepth);
    if (copy !== NOT_JSON && jsonSafe()) {
      this.json(JSONStringify(copy));
      this.checkDecodeCost(joinCost(to - from));
      return;
    }
    this.holes = -1;
    this.header(0x90, -1, 0xdc, 0xdd, to - from, 15);
    this.stack[0] = v;
    const keys = this.keys;
    const plain = ObjectGetPrototypeOf(v) === ArrayPrototype && this.holesUndefined();
    for (let i = from; i < to; i++) {
      keys[0] = i;
      this.value(plain || ObjectHasOwn(v, i) ? v[i] : undefined, 1);
    }
    this.settled();
    this.checkDecodeCost(joinCost(to - from));
  }

  /** Whether holes read as undefined, asked once per value and then kept: see settled(). */
  private holesUndefined(): boolean {
    if (this.holes < 0) this.holes = holesReadUndefined() ? 1 : 0;
    return this.holes === 1;
  }

  /** The checks at the end of a value: its size, and that the value's getters did not put an
   * index property on a prototype while it was read, which a hole read after it would have
   * read instead of undefined. */
  private settled(): void {
    if (this.room() < 0) throw this.tooLarge();
    if (this.holes === 1 && !holesReadUndefined()) {
      throw new CodecError(
        "the value put an index property on Object.prototype while it was converted",
      );
    }
  }

  /** text as an EXT_JSON payload. */
  private json(text: string): void {
    const len = text.length;
    let space = len * 3;
    const room = this.room() - 6;
    if (space > room) {
      if (len > room) throw this.tooLarge();
      space = room;
    }
    this.ensure(6 + space);
    const start = this.pos + 6;
    const n = this.encodeAll(text, start, start + space);
    this.buf[this.pos] = 0xc9;
    DVSetUint32(this.view, this.pos + 1, n);
    this.buf[this.pos + 5] = EXT_JSON;
    this.pos = start + n;
  }

  /** Encodes one guest value at the given nesting depth. */
  value(v: any, depth: number): void {
    switch (typeof v) {
      case "string": this.str(v); return;
      case "number":
        if (NumberIsInteger(v) && NumberIsSafeInteger(v) && !ObjectIs(v, -0)) this.int(v);
        else this.float(v);
        return;
      case "boolean": this.u8(v ? 0xc3 : 0xc2); return;
      case "undefined": this.ext(EXT_UNDEFINED, null, 1); this.buf[this.pos++] = 0; return;
      case "bigint": {
        const neg = v < 0n;
        const hex = BigIntToString(neg ? -v : v, 16);
        const n = hex.length + 1;
        this.ext(EXT_BIGINT, null, n);
        this.buf[this.pos++] = neg ? 1 : 0;
        for (let i = 0; i < hex.length; i++) this.buf[this.pos++] = StringCharCodeAt(hex, i);
        return;
      }
      case "symbol":
        throw new CodecError(`cannot convert a Symbol (${this.where(depth)})`);
      case "function": {
        if (this.thrown) throw new CodecError(`${this.where(depth)} is a function, which a thrown value does not carry`);
        const id = this.hooks.registerFunction(v);
        this.ext(EXT_FUNCTION, null, 4);
        DVSetUint32(this.view, this.pos, id);
        this.pos += 4;
        return;
      }
    }
    if (v === null) { this.u8(0xc0); return; }
    if (depth >= this.maxDepth) {
      throw new CodecError(`${this.where(depth)} is nested deeper than ${this.maxDepth} levels`);
    }
    const stack = this.stack;
    for (let i = 0; i < depth; i++) {
      if (stack[i] === v) throw new CodecError(`${this.where(depth)} is a cycle (it contains itself)`);
    }
    stack[depth] = v;
    const proto = ObjectGetPrototypeOf(v);
    if (proto === ObjectPrototype || proto === null) { this.object(v, depth); return; }
    if (ArrayIsArray(v)) {
      const n = v.length;
      this.header(0x90, -1, 0xdc, 0xdd, n, 15);
      const keys = this.keys;
      // Only own items: a hole is undefined, never what a prototype holds at its index.
      if (proto === ArrayPrototype && this.holesUndefined()) {
        for (let i = 0; i < n; i++) { keys[depth] = i; this.value(v[i], depth + 1); }
      } else {
        for (let i = 0; i < n; i++) { keys[depth] = i; this.value(ObjectHasOwn(v, i) ? v[i] : undefined, depth + 1); }
      }
      return;
    }
    if (ArrayBufferIsView(v)) {
      const tag = TypedArrayTag(v);
      if (tag === "Uint8Array" || tag === "Uint8ClampedArray") { this.bin(v as Uint8Array); return; }
      if (tag === undefined) {
        throw new CodecError(`cannot convert a DataView (${this.where(depth)}); pass a Uint8Array`);
      }
      const n = TypedArrayLength(v);
      this.header(0x90, -1, 0xdc, 0xdd, n, 15);
      for (let i = 0; i < n; i++) { this.keys[depth] = i; this.value((v as any)[i], depth + 1); }
      return;
    }
    if (IsAnyArrayBuffer(v)) { this.bin(new Uint8ArrayCtor(v)); return; }
    if (IsDate(v)) {
      const t = DateGetTime(v);
      if (t !== t) throw new CodecError(`cannot convert an Invalid Date (${this.where(depth)})`);
      if (t < MIN_DATE_MS || t > MAX_DATE_MS) {
        throw new CodecError(`${this.where(depth)} is a Date outside the years 1-9999 that Python can hold`);
      }
      this.ext(EXT_DATE, null, 8);
      DVSetFloat64(this.view, this.pos, t);
      this.pos += 8;
      return;
    }
    if (IsMap(v)) {
      this.header(0x80, -1, 0xde, 0xdf, MapSize(v), 15);
      let mixed = false;
      MapForEach(v, (val: any, key: any) => {
        if ((typeof key === "object" && key !== null && !IsDate(key)) || typeof key === "function") {
          throw new CodecError(`${this.where(depth)} is a Map with an object key; Python dict keys must be primitives`);
        }
        if (typeof key === "boolean" || typeof key === "bigint" || typeof key === "object") mixed = true;
        this.keys[depth] = null;
        this.value(key, depth + 1);
        this.keys[depth] = typeof key === "string" || typeof key === "number" ? key : null;
        this.value(val, depth + 1);
      });
      if (mixed) this.distinctInPython(v, true, depth);
      return;
    }
    if (IsSet(v)) {
      // A Set is an ext whose payload is an encoded array, so it nests with the same rules.
      const outer = this.pos;
      this.ensure(6);
      this.pos += 6; // ext32 header: 0xc9, u32 length, type
      this.header(0x90, -1, 0xdc, 0xdd, SetSize(v), 15);
      let mixed = false;
      SetForEach(v, (item: any) => {
        if ((typeof item === "object" && item !== null && !IsDate(item)) || typeof item === "function") {
          throw new CodecError(`${this.where(depth)} is a Set holding an object; Python set items must be primitives`);
        }
        if (typeof item === "boolean" || typeof item === "bigint" || typeof item === "object") mixed = true;
        this.keys[depth] = null;
        this.value(item, depth + 1);
      });
      if (mixed) this.distinctInPython(v, false, depth);
      const len = this.pos - outer - 6;
      this.buf[outer] = 0xc9;
      DVSetUint32(this.view, outer + 1, len);
      this.buf[outer + 5] = EXT_SET;
      return;
    }
    if (IsPromise(v)) {
      throw new CodecError(`cannot convert a Promise nested inside ${this.where(depth)}; await it first`);
    }
    this.other(v, proto, depth);
  }

  /** An object that inherits from proto, neither Object.prototype nor null, and is none of the
   * above: an Error, refused (its state is beyond its own keys), or its own enumerable keys. */
  other(v: any, proto: any, depth: number): void {
    if (IsError(v)) { this.error(v, depth); return; }
    let refusal = brandRefusal(v);
    if (refusal === null) {
      let verdicts = this.verdicts;
      if (verdicts === null) verdicts = this.verdicts = new MapCtor();
      refusal = MapGet(verdicts, proto);
      if (refusal === undefined) {
        refusal = classRefusal(proto);
        MapSet(verdicts, proto, refusal);
      }
    }
    if (refusal !== null) throw new CodecError(`${this.where(depth)} ${refusal}`);
    this.object(v, depth);
  }

  /** An Error, as a map: the mark, with [name, message, stack], then "cause" and "errors" when
   * it has them as own properties, then its other own string-keyed properties, enumerable ones
   * first. Each is read once: the enumerable ones by spread, the others by descriptor (a
   * getter runs once, and what it returned is what is sent). name, message and stack that are
   * not its own are inherited (inheritedPart); they must be strings, or absent (""). */
  error(v: any, depth: number): void {
    // The mark's array is a level of its own.
    if (depth + 1 >= this.maxDepth) {
      throw new CodecError(`${this.where(depth)} is nested deeper than ${this.maxDepth} levels`);
    }
    const c = { ...v };
    const texts: any = ObjectCreate(null);
    for (let i = 0; i < 3; i++) {
      const key = ERROR_TEXTS[i];
      let text = ownPart(v, c, key);
      if (text === ABSENT) text = inheritedPart(v, key);
      if (text === undefined) text = "";
      if (typeof text !== "string") {
        throw new CodecError(`${this.where(depth)} is an Error whose ${key} is not a string`);
      }
      texts[key] = text;
    }
    const cause = ownPart(v, c, "cause");
    const errors = ownPart(v, c, "errors");
    if (errors !== ABSENT && !ArrayIsArray(errors)) {
      throw new CodecError(`${this.where(depth)} is an Error whose errors property is not an Array`);
    }
    const keys: any = ObjectCreate(null), vals: any = ObjectCreate(null);
    let n = 0;
    const enumerable = ObjectKeys(c);
    for (let i = 0; i < enumerable.length; i++) {
      const k = enumerable[i];
      if (ERROR_PARTS[k] === true) continue;
      keys[n] = k;
      vals[n++] = c[k];
    }
    const names = ObjectGetOwnPropertyNames(v);
    for (let i = 0; i < names.length; i++) {
      const k = names[i];
      if (ERROR_PARTS[k] === true || ObjectHasOwn(c, k)) continue;
      const d = ObjectGetOwnPropertyDescriptor(v, k);
      if (d === undefined) continue; // deleted by a getter read before it
      keys[n] = k;
      vals[n++] = described(d, v);
    }
    this.header(0x80, -1, 0xde, 0xdf, 1 + (cause !== ABSENT ? 1 : 0) + (errors !== ABSENT ? 1 : 0) + n, 15);
    this.ext(EXT_ERROR, null, 1);
    this.buf[this.pos++] = 0;
    this.u8(0x93);
    this.str(texts.name);
    this.str(texts.message);
    this.str(texts.stack === "" ? "" : this.hooks.errorStack(texts.stack));
    const path = this.keys;
    if (cause !== ABSENT) { this.str("cause"); path[depth] = "cause"; this.value(cause, depth + 1); }
    if (errors !== ABSENT) { this.str("errors"); path[depth] = "errors"; this.value(errors, depth + 1); }
    for (let i = 0; i < n; i++) {
      const k = keys[i];
      this.str(k);
      path[depth] = k;
      this.value(vals[i], depth + 1);
    }
  }

  /** Refuses a Map or Set two of whose keys are distinct in JavaScript but equal in Python,
   * where the dict or set would silently keep one: true and 1 (or false and 0), a number and
   * the BigInt of the same value, two Dates of the same time. Only run when a boolean, a
   * BigInt or a Date is among the keys: numbers, strings, null and undefined alone are
   * distinct in Python whenever they are in JavaScript. */
  distinctInPython(v: any, isMap: boolean, depth: number): void {
    // Integral values as BigInts, Dates as "date <ms>", each to the key that gave it.
    const first = new MapCtor();
    const check = (key: any): void => {
      let canon: any;
      if (typeof key === "boolean") canon = key ? 1n : 0n;
      else if (typeof key === "bigint") canon = key;
      else if (typeof key === "number") canon = NumberIsInteger(key) ? BigIntFn(key) : undefined;
      else if (typeof key === "object" && key !== null) canon = `date ${DateGetTime(key)}`;
      if (canon === undefined) return;
      const earlier = MapGet(first, canon);
      if (earlier !== undefined) {
        const what = isMap ? "a Map whose keys" : "a Set whose items";
        const one = isMap ? "one key of a Python dict" : "one item of a Python set";
        throw new CodecError(`${this.where(depth)} is ${what} ${keyText(earlier)} and ${keyText(key)} would be ${one}`);
      }
      MapSet(first, canon, key);
    };
    if (isMap) MapForEach(v, (_: any, key: any) => check(key));
    else SetForEach(v, check);
  }

  /** Any other object: its own enumerable string-keyed properties, like JSON. Read once, by
   * spread, into a copy: a getter that deletes a later key then cannot make its read fall
   * through to a prototype. */
  object(v: any, depth: number): void {
    const c = { ...v };
    const keys = ObjectKeys(c);
    const n = keys.length;
    this.header(0x80, -1, 0xde, 0xdf, n, 15);
    const path = this.keys;
    for (let i = 0; i < n; i++) {
      const k = keys[i];
      this.str(k);
      path[depth] = k;
      this.value(c[k], depth + 1);
    }
  }
}

/** Defines an Error's own part as its constructor would: writable, configurable, not enumerable. */
function defineHidden(err: any, key: string, value: any): void {
  ObjectDefineProperty(err, key, { __proto__: null, value, writable: true, enumerable: false, configurable: true } as PropertyDescriptor);
}

/** A Map key or Set item as an error message names it. */
function keyText(key: any): string {
  if (typeof key === "bigint") return `${BigIntToString(key, 10)}n`;
  if (typeof key === "object" && key !== null) return `Date(${DateGetTime(key)})`;
  return `${key}`;
}

/** Whether a hole in a plain array reads as undefined: no index property on Array.prototype
 * or Object.prototype, and Array.prototype still inherits from Object.prototype directly.
 * Array.prototype is an array itself, so an index property on it would raise its length;
 * Object.prototype's own names list its index properties first. */
export function holesReadUndefined(): boolean {
  if (ArrayPrototype.length !== 0 || ObjectGetPrototypeOf(ArrayPrototype) !== ObjectPrototype) return false;
  const names = ObjectGetOwnPropertyNames(ObjectPrototype);
  if (names.length === 0) return true;
  const c = StringCharCodeAt(names[0], 0);
  return !(c >= 0x30 && c <= 0x39);
}

/** Whether JSON.stringify of a copy made by jsonCopy runs no guest code and reads only what
 * the copy holds: no toJSON on Object.prototype or Array.prototype, no enumerable property on
 * Object.prototype (the copy's for-in would visit it) and holes reading as undefined. */
function jsonSafe(): boolean {
  return ObjectGetOwnPropertyDescriptor(ObjectPrototype, "toJSON") === undefined &&
    ObjectGetOwnPropertyDescriptor(ArrayPrototype, "toJSON") === undefined &&
    ObjectKeys(ObjectPrototype).length === 0 && holesReadUndefined();
}

// What jsonCopy returns for a value JSON.stringify would not carry exactly.
const NOT_JSON: any = ObjectCreate(null);

/** For an object v, a copy of it that JSON.stringify carries exactly as value() would carry v,
 * or NOT_JSON. The copy holds only plain objects and arrays, made by this function, and in them
 * strings, booleans, null and numbers other than -0, NaN, infinities and integers beyond 2**53,
 * within the depth limit (which also rules out cycles). Strings are not checked: JSON.stringify
 * escapes a lone surrogate as \udXXX, and the host turns those into U+FFFD, as the msgpack lane
 * does.
 *
 * Each property of v is read once, here: a getter, or a Proxy's trap, that changes some part
 * of v, or plants a toJSON, while it is read cannot make JSON.stringify write anything but
 * what was checked, since JSON.stringify only ever sees the copy. An object is copied by
 * spread, which reads its own enumerable properties only; an array item by index, so holes
 * read as undefined only when holesReadUndefined() (the caller checks jsonSafe() after).
 *
 * Written for jitless V8, where a call costs more than the checks and each bytecode counts:
 * primitives are checked inline, and each item's own properties are checked inline too (in
 * copyItems, whose inner loop repeats the outer one a level down), so the walk makes one
 * call per two levels of objects, none for an array of flat records. typeof tests in an if
 * chain compile to one bytecode each, unlike a switch on typeof. Properties are read, and so
 * any getter the guest defined runs, depth first, as a plain recursive walk would. */
function jsonCopy(v: any, depth: number, maxDepth: number): any {
  if (depth >= maxDepth) return NOT_JSON;
  const proto = ObjectGetPrototypeOf(v);
  if (proto === ArrayPrototype) {
    if (!ArrayIsArray(v)) return NOT_JSON;
    jsonLists++;
    return copyItems(v, 0, v.length, depth, maxDepth);
  }
  if (proto !== ObjectPrototype && proto !== null) return NOT_JSON;
  jsonDicts++;
  const c = { ...v };
  for (const k in c) {
    const y = c[k];
    if (typeof y === "string" || typeof y === "boolean") continue;
    if (typeof y === "number") {
      if (y === (y | 0) ? y === 0 && 1 / y < 0 : y - y !== 0 || (y % 1 === 0 && (y > MAX_SAFE || y < -MAX_SAFE))) {
        return NOT_JSON;
      }
      continue;
    }
    if (typeof y !== "object") return NOT_JSON;
    if (y === null) continue;
    const cy = jsonCopy(y, depth + 1, maxDepth);
    if (cy === NOT_JSON) return NOT_JSON;
    c[k] = cy;
  }
  return c;
}

/** Items from..to of the array v, which sits at depth, as a new array of what jsonCopy makes of
 * each, or NOT_JSON. */
function copyItems(v: any, from: number, to: number, depth: number, maxDepth: number): any {
  // Sized up front: cheaper than growing it, and every slot is filled or the copy dropped.
  const out: any[] = new ArrayCtor(to - from);
  let j = 0;
  for (let i = from; i < to; i++) {
    const x = v[i];
    if (typeof x === "string" || typeof x === "boolean") { out[j++] = x; continue; }
    if (typeof x === "number") {
      // An int32 (-0 too, as -0 === 0) needs only the sign test; others are checked in full.
      if (x === (x | 0) ? x === 0 && 1 / x < 0 : x - x !== 0 || (x % 1 === 0 && (x > MAX_SAFE || x < -MAX_SAFE))) {
        return NOT_JSON;
      }
      out[j++] = x;
      continue;
    }
    if (typeof x !== "object") return NOT_JSON;
    if (x === null) { out[j++] = x; continue; }
    if (depth + 1 >= maxDepth) return NOT_JSON;
    const xProto = ObjectGetPrototypeOf(x);
    if (xProto === ArrayPrototype) {
      if (!ArrayIsArray(x)) return NOT_JSON;
      jsonLists++;
      const cx = copyItems(x, 0, x.length, depth + 1, maxDepth);
      if (cx === NOT_JSON) return NOT_JSON;
      out[j++] = cx;
      continue;
    }
    if (xProto !== ObjectPrototype && xProto !== null) return NOT_JSON;
    jsonDicts++;
    const c = { ...x };
    for (const k in c) {
      const y = c[k];
      if (typeof y === "string" || typeof y === "boolean") continue;
      if (typeof y === "number") {
        if (y === (y | 0) ? y === 0 && 1 / y < 0 : y - y !== 0 || (y % 1 === 0 && (y > MAX_SAFE || y < -MAX_SAFE))) {
          return NOT_JSON;
        }
        continue;
      }
      if (typeof y !== "object") return NOT_JSON;
      if (y === null) continue;
      const cy = jsonCopy(y, depth + 2, maxDepth);
      if (cy === NOT_JSON) return NOT_JSON;
      c[k] = cy;
    }
    out[j++] = c;
  }
  return out;
}

// -- The decode budget: what the host charges for decoding a frame (pydeno/host/wire/budget.py) --------
// The arrays and objects of the value the last JSON-exactness check passed: what JSON.stringify
// writes, so the brackets outside strings that the host counts in the payload.
let jsonLists = 0, jsonDicts = 0;

const listCost = (n: number): number => (n ? 80 + 8 * n : 72);
const mapCost = (n: number): number => (n === 0 ? 72 : n <= 5 ? 232 : 168 + 64 * n);
const strCost = (n: number): number => (n <= 1 ? 0 : n === 2 ? 112 : 128 + 4 * n);
const binCost = (n: number): number => (n <= 1 ? 0 : 48 + n);
// The growth of the list a value's parts join into, for one part of n items.
const joinCost = (n: number): number => 64 + 9 * n;
const jsonCost = (lists: number, dicts: number, n: number): number => {
  const rest = n - 3 * (lists + dicts);
  return 96 * lists + 200 * dicts + 15 * (rest > 0 ? rest : 0);
};

// Tokens by first byte: FIXED ones have a length and a charge known from it; the others read
// a length or count from the WIDTH bytes after it.
const FIXED = 0, STR = 1, BIN = 2, ARRAY = 3, MAP = 4, EXT = 5, FIXEXT = 6;
const KIND = new Uint8Array(256), LEN = new Uint8Array(256), WIDTH = new Uint8Array(256);
const CHARGE = new Int32Array(256);
for (let b = 0; b < 256; b++) LEN[b] = 1;
const fixed = (b: number, len: number, charge: number): void => {
  KIND[b] = FIXED; LEN[b] = len; CHARGE[b] = charge;
};
for (let b = 0xe0; b <= 0xfa; b++) fixed(b, 1, 32); // CPython caches only -5 to 256
for (const [b, len, charge] of [
  [0xca, 5, 32], [0xcb, 9, 32], [0xcc, 2, 0], [0xcd, 3, 32], [0xce, 5, 32], [0xcf, 9, 48],
  [0xd0, 2, 32], [0xd1, 3, 32], [0xd2, 5, 32], [0xd3, 9, 48],
]) fixed(b, len, charge);
for (let n = 0; n < 16; n++) { fixed(0x80 | n, 1, mapCost(n)); fixed(0x90 | n, 1, listCost(n)); }
for (let n = 0; n < 32; n++) fixed(0xa0 | n, 1 + n, strCost(n));
for (const [b, kind, width] of [
  [0xd9, STR, 1], [0xda, STR, 2], [0xdb, STR, 4], [0xc4, BIN, 1], [0xc5, BIN, 2], [0xc6, BIN, 4],
  [0xdc, ARRAY, 2], [0xdd, ARRAY, 4], [0xde, MAP, 2], [0xdf, MAP, 4], [0xc7, EXT, 1], [0xc8, EXT, 2], [0xc9, EXT, 4],
]) { KIND[b] = kind; WIDTH[b] = width; }
for (const [b, size] of [[0xd4, 1], [0xd5, 2], [0xd6, 4], [0xd7, 8], [0xd8, 16]]) { KIND[b] = FIXEXT; LEN[b] = size; }
// The length of a FIXED token, 0 for the others.
const STEP = new Uint8Array(256);
for (let b = 0; b < 256; b++) if (KIND[b] === FIXED) STEP[b] = LEN[b];

/** What an extension value of type code and n payload bytes builds besides its payload. */
function extCharge(code: number, n: number): number {
  return code === EXT_BIGINT ? 96 + 2 * n : code === EXT_DATE ? 128 : code === EXT_FUNCTION ? 256
    : code === EXT_ERROR ? 1024 : 0;
}

function uintAt(buf: Uint8Array, view: DataView, p: number, width: number): number {
  return width === 1 ? buf[p] : width === 2 ? DVGetUint16(view, p) : DVGetUint32(view, p);
}

/** What the host charges for decoding the msgpack in buf[pos, end), which this writer wrote:
 * pydeno/host/wire/budget.py's frame_cost, with the JSON payload's arrays and objects as counted. */
function frameCost(buf: Uint8Array, view: DataView, pos: number, end: number): number {
  let cost = 0;
  while (pos < end) {
    const b = buf[pos];
    // Fixed tokens, most of any frame, in as few bytecodes as jitless V8 allows.
    const step = STEP[b];
    if (step !== 0) { pos += step; cost += CHARGE[b]; continue; }
    const k = KIND[b];
    let n: number, head: number;
    if (k === FIXEXT) {
      n = LEN[b];
      head = pos + 2;
      const code = buf[pos + 1];
      if (code !== EXT_SET && code !== EXT_JSON) {
        // A run of like extension values (Dates, undefined) takes a tight loop.
        const each = (n > 1 ? 48 + n : 0) + extCharge(code, n);
        do { pos += 2 + n; cost += each; } while (pos < end && buf[pos] === b && buf[pos + 1] === code);
        continue;
      }
    } else {
      n = uintAt(buf, view, pos + 1, WIDTH[b]);
      head = pos + 1 + WIDTH[b] + (k === EXT ? 1 : 0);
    }
    if (k === STR) { pos = head + n; cost += strCost(n); continue; }
    if (k === BIN) { pos = head + n; cost += binCost(n); continue; }
    if (k === ARRAY) { pos = head; cost += listCost(n); continue; }
    if (k === MAP) { pos = head; cost += mapCost(n); continue; }
    const code = buf[head - 1];
    if (n > 1) cost += 48 + n;
    if (code === EXT_SET) {
      // Its items follow as tokens; the Set's own table is charged for their count.
      const h = buf[head];
      const count = h >= 0x90 && h <= 0x9f ? h & 0x0f : h === 0xdc ? uintAt(buf, view, head + 1, 2) : uintAt(buf, view, head + 1, 4);
      cost += 216 + 112 * count;
      pos = head;
      continue;
    }
    cost += code === EXT_JSON ? jsonCost(jsonLists, jsonDicts, n) : extCharge(code, n);
    pos = head + n;
  }
  return cost;
}

export interface DecodeHooks {
  /** Resolves a function handle the host sends back. */
  lookupFunction(id: number): any;
}

/** A msgpack reader over one frame from the host. The host is trusted, but budgets still
 * apply so that a bug on either side fails with a clear error instead of a stack overflow. */
export class Reader {
  buf: Uint8Array;
  view: DataView;
  pos: number;
  end: number;
  maxDepth: number;
  hooks: DecodeHooks;

  constructor(buf: Uint8Array, start: number, end: number, maxDepth: number, hooks: DecodeHooks) {
    this.buf = buf;
    this.view = new DataViewCtor(ArrayBufferOf(buf));
    this.pos = start;
    this.end = end;
    this.maxDepth = maxDepth;
    this.hooks = hooks;
  }

  /** Point the reader at a new frame; the DataView is rebuilt only for a new buffer. */
  reset(buf: Uint8Array, start: number, end: number): void {
    if (buf !== this.buf) {
      this.buf = buf;
      this.view = new DataViewCtor(ArrayBufferOf(buf));
    }
    this.pos = start;
    this.end = end;
  }

  need(n: number): void {
    if (this.pos + n > this.end) throw new ErrorCtor("truncated frame from host");
  }

  u8(): number { this.need(1); return this.buf[this.pos++]; }
  u16(): number { this.need(2); const v = DVGetUint16(this.view, this.pos); this.pos += 2; return v; }
  u32(): number { this.need(4); const v = DVGetUint32(this.view, this.pos); this.pos += 4; return v; }

  strOf(n: number): string {
    this.need(n);
    const start = this.pos;
    this.pos += n;
    if (n < 24) {
      const buf = this.buf;
      let s = "";
      for (let i = start; i < start + n; i++) {
        const c = buf[i];
        if (c >= 0x80) return decodeUtf8(decoder, U8Subarray(buf, start, start + n));
        s += StringFromCharCode(c);
      }
      return s;
    }
    return decodeUtf8(decoder, U8Subarray(this.buf, start, start + n));
  }

  binOf(n: number): Uint8Array {
    this.need(n);
    const out = U8Slice(this.buf, this.pos, this.pos + n);
    this.pos += n;
    return out;
  }

  arrayOf(n: number, depth: number): any[] {
    if (depth >= this.maxDepth) throw new CodecError(`value is nested deeper than ${this.maxDepth} levels`);
    const out: any[] = [];
    for (let i = 0; i < n; i++) {
      ObjectDefineProperty(out, i, { __proto__: null, value: this.value(depth + 1), writable: true, enumerable: true, configurable: true } as PropertyDescriptor);
    }
    return out;
  }

  mapOf(n: number, depth: number): any {
    if (depth >= this.maxDepth) throw new CodecError(`value is nested deeper than ${this.maxDepth} levels`);
    const p = this.pos;
    if (n > 0 && p + 3 <= this.end && this.buf[p] === 0xd4 && this.buf[p + 1] === EXT_ERROR) {
      if (this.buf[p + 2] !== 0) throw new ErrorCtor("malformed Error mark from host");
      this.pos = p + 3;
      return this.errorOf(n - 1, depth);
    }
    const keys: any = ObjectCreate(null), vals: any = ObjectCreate(null);
    let allStrings = true;
    for (let i = 0; i < n; i++) {
      const k = this.value(depth + 1);
      if (typeof k !== "string") allStrings = false;
      keys[i] = k;
      vals[i] = this.value(depth + 1);
    }
    if (allStrings) {
      const obj: any = {};
      for (let i = 0; i < n; i++) {
        // defineProperty, not assignment: a setter the guest put on Object.prototype (or
        // a "__proto__" key) must not intercept the value.
        ObjectDefineProperty(obj, keys[i], { __proto__: null, value: vals[i], writable: true, enumerable: true, configurable: true } as PropertyDescriptor);
      }
      return obj;
    }
    const m = new MapCtor();
    for (let i = 0; i < n; i++) MapSet(m, keys[i], vals[i]);
    return m;
  }

  /** A real Error, of the native class its name names (else an Error with that name as its own),
   * from a map whose mark was read: [name, message, stack], then n more entries. Its parts are
   * defined as the constructors define them (not enumerable), its other properties as
   * enumerable own ones. */
  errorOf(n: number, depth: number): any {
    const head = this.value(depth + 1);
    if (!ArrayIsArray(head) || ArrayLength(head) !== 3 || typeof head[0] !== "string" ||
        typeof head[1] !== "string" || typeof head[2] !== "string") {
      throw new ErrorCtor("malformed Error from host");
    }
    const name = head[0];
    const ctor = ERROR_CTORS[name];
    // Reflect.construct, not the constructor called: AggregateError's would iterate its list.
    const err = ReflectConstruct(ErrorCtor, EMPTY, ctor === undefined ? ErrorCtor : ctor);
    if (ctor === undefined) defineHidden(err, "name", name);
    defineHidden(err, "message", head[1]);
    defineHidden(err, "stack", head[2]);
    for (let i = 0; i < n; i++) {
      const k = this.value(depth + 1);
      if (typeof k !== "string" || k === "name" || k === "message" || k === "stack") {
        throw new ErrorCtor("malformed Error from host");
      }
      const v = this.value(depth + 1);
      if (k === "cause" || k === "errors") {
        if (k === "errors" && !ArrayIsArray(v)) throw new ErrorCtor("malformed Error from host");
        defineHidden(err, k, v);
      } else {
        ObjectDefineProperty(err, k, { __proto__: null, value: v, writable: true, enumerable: true, configurable: true } as PropertyDescriptor);
      }
    }
    return err;
  }

  ext(type: number, n: number, depth: number): any {
    this.need(n);
    const start = this.pos;
    switch (type) {
      case EXT_ERROR: throw new ErrorCtor("an Error mark from host that is not a map's first key");
      case EXT_UNDEFINED: this.pos += n; return undefined;
      case EXT_BIGINT: {
        const neg = this.buf[start] === 1;
        let hex = "0x";
        for (let i = start + 1; i < start + n; i++) hex += StringFromCharCode(this.buf[i]);
        this.pos += n;
        const b = BigIntFn(hex);
        return neg ? -b : b;
      }
      case EXT_DATE: {
        const t = DVGetFloat64(this.view, start);
        this.pos += n;
        return new DateCtor(t);
      }
      case EXT_FUNCTION: {
        const id = DVGetUint32(this.view, start);
        this.pos += n;
        return this.hooks.lookupFunction(id);
      }
      case EXT_JSON: {
        // The host's fast lane for a large, plain JSON-shaped value (already checked for
        // depth by the host): native JSON.parse beats a msgpack walk in jitless JavaScript.
        const text = decodeUtf8(decoder, U8Subarray(this.buf, start, start + n));
        this.pos += n;
        return JSONParse(text);
      }
      case EXT_SET: {
        const items = this.value(depth);
        if (this.pos !== start + n || !ArrayIsArray(items)) throw new ErrorCtor("malformed Set from host");
        const s = new SetCtor();
        const count = ArrayLength(items);
        for (let i = 0; i < count; i++) SetAdd(s, items[i]);
        return s;
      }
    }
    throw new ErrorCtor(`unknown extension type ${type} from host`);
  }

  value(depth: number): any {
    const b = this.u8();
    if (b < 0x80) return b;
    if (b >= 0xe0) return b - 0x100;
    if (b >= 0xa0 && b <= 0xbf) return this.strOf(b & 0x1f);
    if (b >= 0x90 && b <= 0x9f) return this.arrayOf(b & 0x0f, depth);
    if (b >= 0x80 && b <= 0x8f) return this.mapOf(b & 0x0f, depth);
    switch (b) {
      case 0xc0: return null;
      case 0xc2: return false;
      case 0xc3: return true;
      case 0xc4: return this.binOf(this.u8());
      case 0xc5: return this.binOf(this.u16());
      case 0xc6: return this.binOf(this.u32());
      case 0xc7: { const n = this.u8(); return this.ext(this.u8(), n, depth); }
      case 0xc8: { const n = this.u16(); return this.ext(this.u8(), n, depth); }
      case 0xc9: { const n = this.u32(); return this.ext(this.u8(), n, depth); }
      case 0xca: { this.need(4); const v = DVGetFloat32(this.view, this.pos); this.pos += 4; return v; }
      case 0xcb: { this.need(8); const v = DVGetFloat64(this.view, this.pos); this.pos += 8; return v; }
      case 0xcc: return this.u8();
      case 0xcd: return this.u16();
      case 0xce: return this.u32();
      case 0xcf: { this.need(8); const v = DVGetBigUint64(this.view, this.pos); this.pos += 8; return v <= SAFE_BIGINT_MAX ? NumberFn(v) : v; }
      case 0xd0: { this.need(1); const v = DVGetInt8(this.view, this.pos); this.pos += 1; return v; }
      case 0xd1: { this.need(2); const v = DVGetInt16(this.view, this.pos); this.pos += 2; return v; }
      case 0xd2: { this.need(4); const v = DVGetInt32(this.view, this.pos); this.pos += 4; return v; }
      case 0xd3: {
        this.need(8);
        const v = DVGetBigInt64(this.view, this.pos);
        this.pos += 8;
        return v >= SAFE_BIGINT_MIN && v <= SAFE_BIGINT_MAX ? NumberFn(v) : v;
      }
      case 0xd4: return this.ext(this.u8(), 1, depth);
      case 0xd5: return this.ext(this.u8(), 2, depth);
      case 0xd6: return this.ext(this.u8(), 4, depth);
      case 0xd7: return this.ext(this.u8(), 8, depth);
      case 0xd8: return this.ext(this.u8(), 16, depth);
      case 0xd9: return this.strOf(this.u8());
      case 0xda: return this.strOf(this.u16());
      case 0xdb: return this.strOf(this.u32());
      case 0xdc: return this.arrayOf(this.u16(), depth);
      case 0xdd: return this.arrayOf(this.u32(), depth);
      case 0xde: return this.mapOf(this.u16(), depth);
      case 0xdf: return this.mapOf(this.u32(), depth);
    }
    throw new ErrorCtor(`unknown msgpack byte 0x${b.toString(16)} from host`);
  }
}
