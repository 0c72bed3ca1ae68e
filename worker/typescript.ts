// TypeScript for evals: types stripped by Deno's own transpiler, positions mapped back.
//
// Deno transpiles a module it loads from a data: URL of type application/typescript. The
// guest's code becomes the body of an async function in such a module (async, so that
// top-level await parses); the function is never called: its text, which V8 keeps as the
// transpiler wrote it, is the JavaScript that the worker then evaluates like any eval, so
// the program keeps an eval's meaning (its last expression is its value, its declarations
// stay for the next eval).
//
// The transpiler reprints the code, so positions in that JavaScript are not the ones the
// guest wrote. The two texts are the same tokens but for what the transpiler removed
// (types) or added (semicolons, the bodies of enums and parameter properties), so an error's
// frames are mapped back by lining the tokens up, only when an error needs it.

// deno-lint-ignore-file no-explicit-any
const FunctionCall = Function.prototype.call;
const uncurry = (fn: any) => FunctionCall.bind(fn) as (self: any, ...args: any[]) => any;
const FunctionToString = uncurry(Function.prototype.toString);
const StringSlice = uncurry(String.prototype.slice);
const StringIndexOf = uncurry(String.prototype.indexOf);
const StringLastIndexOf = uncurry(String.prototype.lastIndexOf);
const StringCharCodeAt = uncurry(String.prototype.charCodeAt);
const StringStartsWith = uncurry(String.prototype.startsWith);
const RegExpExec = uncurry(RegExp.prototype.exec);
const ErrorCtor = Error;
const SyntaxErrorCtor = SyntaxError;
const Int32ArrayCtor = Int32Array;
const NumberParseInt = Number.parseInt;
const StringFn = String;
const ObjectDefineProperty = Object.defineProperty;
const coreEncode: (s: string) => Uint8Array = (Deno as any)[(Deno as any).internal].core.encode;
const btoaFn = globalThis.btoa;
const importModule = (url: string): Promise<any> => import(url);

const PREFIX = "export default async function __pydeno_ts() {";
const DATA_URL = "data:application/typescript;base64,";
/** The script name of the JavaScript of TypeScript eval number n; its frames are mapped back. */
export const TS_SCRIPT = "guest:ts:";
/** What mapped frames name, as a JavaScript eval's do. */
const EVAL_SCRIPT = "guest:eval";

function base64(text: string): string {
  const bytes = coreEncode(text);
  let binary = "";
  for (let i = 0; i < bytes.length; i += 0x8000) {
    let chunk = "";
    const end = i + 0x8000 < bytes.length ? i + 0x8000 : bytes.length;
    for (let j = i; j < end; j++) chunk += StringFn.fromCharCode(bytes[j]);
    binary += chunk;
  }
  return btoaFn(binary);
}

// --- Transpiling -------------------------------------------------------------------------

/** The JavaScript of a TypeScript program, or a SyntaxError at its position in `code`. */
export async function transpile(code: string): Promise<string> {
  let mod: any;
  try {
    mod = await importModule(DATA_URL + base64(PREFIX + code + "\n}"));
  } catch (e) {
    throw parseFailure(e, code);
  }
  const fn = mod.default;
  if (typeof fn !== "function") throw new ErrorCtor("the TypeScript program could not be transpiled");
  const text: string = FunctionToString(fn);
  const open = StringIndexOf(text, "{");
  const close = StringLastIndexOf(text, "}");
  if (open < 0 || close <= open) throw new ErrorCtor("the TypeScript program could not be transpiled");
  return StringSlice(text, open + 1, close);
}

const PARSE_AT = /\n\s*at data:application\/typescript;base64,[A-Za-z0-9+/=]*:(\d+):(\d+)\s*$/;

/** Deno's parse error (a TypeError whose message is the SyntaxError, an excerpt of the
 * module and the data: URL) as a SyntaxError at the position in the guest's own code, with
 * an excerpt of that code. */
function parseFailure(e: any, code: string): any {
  let message = "";
  try { message = StringFn(e?.message ?? ""); } catch { return e; }
  const found = RegExpExec(PARSE_AT, message);
  if (found === null) return e;
  let text = StringSlice(message, 0, found.index);
  if (StringStartsWith(text, "SyntaxError: ")) text = StringSlice(text, "SyntaxError: ".length);
  const nl = StringIndexOf(text, "\n");
  if (nl >= 0) text = StringSlice(text, 0, nl);
  const line = NumberParseInt(found[1], 10);
  let column = NumberParseInt(found[2], 10);
  if (line === 1) column = column > PREFIX.length ? column - PREFIX.length : 1;
  const excerpt = lineOf(code, line);
  const gutter = StringFn(line);
  let pad = "";
  for (let i = 0; i < gutter.length; i++) pad += " ";
  let caret = "";
  for (let i = 1; i < column; i++) caret += " ";
  const full = `${text}\n${pad} |\n${gutter} | ${excerpt}\n${pad} | ${caret}~`;
  const error = new SyntaxErrorCtor(full);
  ObjectDefineProperty(error, "stack", {
    value: `SyntaxError: ${full}\n    at ${EVAL_SCRIPT}:${line}:${column}`,
    writable: true, enumerable: false, configurable: true,
  });
  return error;
}

function lineOf(text: string, line: number): string {
  const start = offsetOf(text, line, 1);
  const end = StringIndexOf(text, "\n", start);
  return StringSlice(text, start, end < 0 ? text.length : end);
}

// --- Positions ---------------------------------------------------------------------------

/** The programs whose frames can still be mapped: the latest ones, within a character
 * budget, so a long-lived runtime keeps a bounded amount of source for this. */
const KEEP_CHARS = 4 << 20;
const kept: { [n: number]: { code: string; js: string; map: Int32Array | null; spans: Spans | null } } =
  Object.create(null);
let keptChars = 0, oldest = 1, next = 1;

/** Registers a transpiled program; returns the script name its JavaScript runs under. */
export function remember(code: string, js: string): string {
  const n = next++;
  kept[n] = { code, js, map: null, spans: null };
  keptChars += code.length + js.length;
  while (keptChars > KEEP_CHARS && oldest < n) {
    const old = kept[oldest];
    if (old !== undefined) keptChars -= old.code.length + old.js.length;
    delete kept[oldest++];
  }
  return TS_SCRIPT + n;
}

type Spans = { starts: Int32Array; ends: Int32Array; count: number };

function isWord(c: number): boolean {
  return (c >= 48 && c <= 57) || (c >= 65 && c <= 90) || (c >= 97 && c <= 122) || c === 95 || c === 36 || c > 127;
}
function isSpace(c: number): boolean {
  return c === 32 || c === 9 || c === 10 || c === 13 || c === 11 || c === 12 || c === 0xa0 || c === 0xfeff ||
    c === 0x2028 || c === 0x2029;
}

/** The text as tokens: runs of word characters, and every other non-space character alone.
 * Crude on purpose: both texts are cut the same way, and only their alignment matters. */
function tokens(text: string): Spans {
  let starts = new Int32ArrayCtor(256), ends = new Int32ArrayCtor(256), count = 0;
  let i = 0;
  while (i < text.length) {
    const c = StringCharCodeAt(text, i);
    if (isSpace(c)) { i++; continue; }
    let j = i + 1;
    if (isWord(c)) while (j < text.length && isWord(StringCharCodeAt(text, j))) j++;
    if (count === starts.length) {
      const s = new Int32ArrayCtor(count * 2), e = new Int32ArrayCtor(count * 2);
      s.set(starts); e.set(ends);
      starts = s; ends = e;
    }
    starts[count] = i; ends[count] = j; count++;
    i = j;
  }
  return { starts, ends, count };
}

function same(a: string, sa: Spans, i: number, b: string, sb: Spans, j: number): boolean {
  const len = sa.ends[i] - sa.starts[i];
  if (len !== sb.ends[j] - sb.starts[j]) return false;
  for (let k = 0; k < len; k++) {
    if (StringCharCodeAt(a, sa.starts[i] + k) !== StringCharCodeAt(b, sb.starts[j] + k)) return false;
  }
  return true;
}

// How far ahead a token may have moved (past removed types), and how much further a match
// whose next token matches too may be preferred to the nearest one.
const WINDOW = 400, NEAR = 48;

/** For each token of the JavaScript, the token of the TypeScript it came from (-1: added by
 * the transpiler). Greedy, preferring a match whose next token matches too, so that a name
 * in a removed type does not claim the value of the same name after it. */
function align(code: string, sc: Spans, js: string, sj: Spans): Int32Array {
  const map = new Int32ArrayCtor(sj.count);
  let at = 0;
  for (let j = 0; j < sj.count; j++) {
    const limit = at + WINDOW < sc.count ? at + WINDOW : sc.count;
    let found = -1, loose = -1;
    for (let k = at; k < limit; k++) {
      if (!same(js, sj, j, code, sc, k)) continue;
      if (loose < 0) loose = k;
      else if (k - loose > NEAR) break;
      if (j + 1 >= sj.count || (k + 1 < sc.count && same(js, sj, j + 1, code, sc, k + 1))) { found = k; break; }
    }
    if (found < 0) found = loose;
    map[j] = found;
    if (found >= 0) at = found + 1;
  }
  return map;
}

function offsetOf(text: string, line: number, column: number): number {
  let offset = 0;
  for (let l = 1; l < line; l++) {
    const nl = StringIndexOf(text, "\n", offset);
    if (nl < 0) return text.length;
    offset = nl + 1;
  }
  return offset + column - 1;
}

function positionOf(text: string, offset: number): [number, number] {
  let line = 1, start = 0;
  for (;;) {
    const nl = StringIndexOf(text, "\n", start);
    if (nl < 0 || nl >= offset) return [line, offset - start + 1];
    line++;
    start = nl + 1;
  }
}

/** The position in the TypeScript of a position in its JavaScript, or null. */
function mapPosition(n: number, line: number, column: number): [number, number] | null {
  const entry = kept[n];
  if (entry === undefined) return null;
  if (entry.map === null) {
    const sc = tokens(entry.code), sj = tokens(entry.js);
    entry.map = align(entry.code, sc, entry.js, sj);
    entry.spans = sc;
    (entry as any).jsSpans = sj;
  }
  const sj: Spans = (entry as any).jsSpans, sc = entry.spans!, map = entry.map;
  const offset = offsetOf(entry.js, line, column);
  // The token at the offset, else the first after it; an added one takes the next that
  // came from the program (or the last before it).
  let j = 0;
  while (j < sj.count && sj.ends[j] <= offset) j++;
  let k = j;
  while (k < sj.count && map[k] < 0) k++;
  if (k >= sj.count) { k = j - 1; while (k >= 0 && map[k] < 0) k--; }
  if (k < 0) return null;
  const inside = k === j && offset > sj.starts[k] ? offset - sj.starts[k] : 0;
  return positionOf(entry.code, sc.starts[map[k]] + inside);
}

const FRAME = /guest:ts:(\d+):(\d+):(\d+)/;

/** A stack with every frame of a TypeScript eval's JavaScript pointing into its TypeScript. */
export function mapStack(stack: string): string {
  if (StringIndexOf(stack, TS_SCRIPT) < 0) return stack;
  let out = "", rest = stack;
  for (;;) {
    const found = RegExpExec(FRAME, rest);
    if (found === null) return out + rest;
    const mapped = mapPosition(NumberParseInt(found[1], 10), NumberParseInt(found[2], 10), NumberParseInt(found[3], 10));
    const replacement = mapped === null ? `${EVAL_SCRIPT}:?:?` : `${EVAL_SCRIPT}:${mapped[0]}:${mapped[1]}`;
    out += StringSlice(rest, 0, found.index) + replacement;
    rest = StringSlice(rest, found.index + found[0].length);
  }
}
