// TypeScript for evals: types stripped by Deno's own transpiler, positions kept.
//
// Deno implements node:module's stripTypeScriptTypes with its own (Rust) TypeScript
// transpiler. Its "strip" mode replaces the types with spaces, so the JavaScript has every
// token where the guest wrote it and errors need no mapping. Code that needs more than
// stripping (enums, namespaces, parameter properties, <T>x assertions) is transformed
// instead, which reprints it: the two texts are then the same tokens but for what the
// transpiler removed or added (semicolons, the bodies of enums), so an error's frames are
// mapped back by lining the tokens up, only when an error needs it. Either way the result is
// evaluated like any eval, so a program keeps an eval's meaning (its last expression is its
// value, its declarations stay for the next eval).

// deno-lint-ignore-file no-explicit-any
import {
  NumberParseInt,
  ObjectCreate,
  ObjectDefineProperty,
  RegExpExec,
  type Strip,
  StringCharCodeAt,
  StringFn,
  StringIndexOf,
  StringSlice,
  StringStartsWith,
  SyntaxErrorCtor,
  uncurry,
} from "./intrinsics.ts";
const Int32Set = uncurry(Int32Array.prototype.set);
const Int32ArrayCtor = Int32Array;

/** The script name of the JavaScript of transformed TypeScript number n; its frames are
 * mapped back. */
const TS_SCRIPT = "guest:ts:";
/** What mapped frames name, as a JavaScript eval's do. */
export const EVAL_SCRIPT = "guest:eval";


// Options without a prototype: the transpiler reads options it was not given, and the guest
// may have put getters for them on Object.prototype.
/** code with its types replaced by spaces; throws when it needs more than that, or does
 * not parse (saying only that it failed). */
export function stripped(strip: Strip, code: string): string {
  const js: any = strip(code, ObjectCreate(null, { mode: { __proto__: null, value: "strip" } as PropertyDescriptor }));
  if (typeof js !== "string") throw new SyntaxErrorCtor("the TypeScript could not be transpiled");
  return js;
}

/** code transformed (enums, namespaces and the rest too), reprinted; a parse error says where. */
function transformed(strip: Strip, code: string): string {
  const js: any = strip(code, ObjectCreate(null, {
    mode: { __proto__: null, value: "transform" } as PropertyDescriptor,
    sourceMap: { __proto__: null, value: false } as PropertyDescriptor,
  }));
  if (typeof js !== "string") throw new SyntaxErrorCtor("the TypeScript could not be transpiled");
  return js;
}

/** The JavaScript of a TypeScript program and the script name to evaluate it under, or a
 * SyntaxError at its position in `code`. `shown`: what frames in code are named (another
 * name when code is itself rewritten from what was written: main.ts maps that one back). */
export function toJavaScript(strip: Strip, code: string, shown = EVAL_SCRIPT): [string, string] {
  try {
    return [stripped(strip, code), EVAL_SCRIPT];
  } catch { /* not strippable (or not valid): the transform says which */ }
  let js: string;
  try {
    js = transformed(strip, code);
  } catch (e) {
    throw syntaxErrorAt(e, code, shown) ?? e;
  }
  return [js, remember(code, js, shown)];
}

/** The transform's parse error for code (a SyntaxError at its position in the script named
 * `script`, its message after `prefix`), or null when it parses or gives no position. */
export function parseError(strip: Strip, code: string, script: string, prefix = ""): SyntaxError | null {
  try {
    transformed(strip, code);
  } catch (e) {
    return syntaxErrorAt(e, code, script, prefix);
  }
  return null;
}

const GUEST_REPL_FRAME = /<anonymous>:\d+:\d+/;

/** For an error the evaluation threw: when it is V8's refusal to compile the JavaScript (a
 * SyntaxError with no frame in guest code, which V8 gives no position), the transpiler's own
 * parse error for the TypeScript, which has one; otherwise the error itself. */
export function compileFailure(strip: Strip, code: string, e: any, shown = EVAL_SCRIPT): any {
  let stack = "";
  try {
    if (!(e instanceof SyntaxErrorCtor)) return e;
    stack = StringFn(e.stack ?? "");
  } catch { return e; }
  // A frame in guest code means the program threw it while running (JSON.parse, say).
  if (StringIndexOf(stack, "guest:") >= 0 || RegExpExec(GUEST_REPL_FRAME, stack) !== null) return e;
  return parseError(strip, code, shown) ?? e;
}

const PARSE_AT = /\s+at file:\/\/\/stripTypeScriptTypes\.ts:(\d+):(\d+)\s*$/;

/** The transpiler's parse error for `code` (its message the SyntaxError, an excerpt of the
 * code and a made-up file name) as a SyntaxError at its position in the script named
 * `script`, or null when its message gives no position. The excerpt is dropped: the host
 * shows one of the code as its caller wrote it (a Code Mode program has a wrapper). */
function syntaxErrorAt(e: any, code: string, script: string, prefix = ""): SyntaxError | null {
  let message = "";
  try { message = StringFn(e?.message ?? ""); } catch { return null; }
  const found = RegExpExec(PARSE_AT, message);
  if (found === null) return null;
  let text = StringSlice(message, 0, found.index);
  if (StringStartsWith(text, "SyntaxError: ")) text = StringSlice(text, "SyntaxError: ".length);
  const excerpt = StringIndexOf(text, "\n  |");
  if (excerpt >= 0) text = StringSlice(text, 0, excerpt);
  const at = scriptPosition(code, transpilerOffset(code, NumberParseInt(found[1], 10), NumberParseInt(found[2], 10)));
  return compileError(prefix + text, script, at[0], at[1]);
}

/** A SyntaxError for code that did not compile: its stack's one frame is the place, in the
 * script named `script` (line and UTF-16 column from 1, as V8's frames count them), marked
 * as no frame of V8's is (V8 gives one to a SyntaxError a declaration throws as the code
 * starts, at the same place), with `more` said after the mark. */
export function compileError(message: string, script: string, line: number, column: number, more = ""): SyntaxError {
  const error = new SyntaxErrorCtor(message);
  ObjectDefineProperty(error, "stack", {
    __proto__: null,
    value: `SyntaxError: ${message}\n    at ${script}:${line}:${column} (did not compile${more})`,
    writable: true, enumerable: false, configurable: true,
  } as PropertyDescriptor);
  return error;
}

/** The offset in text of the transpiler's line and column: it counts lines by \n alone and
 * columns in code points. */
function transpilerOffset(text: string, line: number, column: number): number {
  let offset = 0;
  for (let l = 1; l < line; l++) {
    const nl = StringIndexOf(text, "\n", offset);
    if (nl < 0) return text.length;
    offset = nl + 1;
  }
  for (let c = 1; c < column && offset < text.length; c++) {
    const unit = StringCharCodeAt(text, offset);
    offset += unit >= 0xd800 && unit <= 0xdbff ? 2 : 1;
  }
  return offset < text.length ? offset : text.length;
}

/** The line and column (from 1) of an offset in text as V8 counts them: lines end at \n,
 * \r\n, \r, U+2028 and U+2029, columns are UTF-16 units. */
export function scriptPosition(text: string, offset: number): [number, number] {
  let line = 1, start = 0;
  for (let i = 0; i < offset && i < text.length; i++) {
    const c = StringCharCodeAt(text, i);
    if (c === 13 && StringCharCodeAt(text, i + 1) === 10) continue;
    if (c === 10 || c === 13 || c === 0x2028 || c === 0x2029) { line++; start = i + 1; }
  }
  return [line, offset - start + 1];
}

// --- Positions ---------------------------------------------------------------------------

/** The programs whose frames can still be mapped: the latest ones, within a character
 * budget, so a long-lived runtime keeps a bounded amount of source for this. */
const KEEP_CHARS = 4 << 20;
type Kept = {
  code: string; js: string; shown: string; map: Int32Array | null; codeTokens: Spans | null; jsTokens: Spans | null;
};
const kept: { [n: number]: Kept } = ObjectCreate(null);
let keptChars = 0, oldest = 1, next = 1;

/** Registers a transformed program; returns the script name its JavaScript runs under. */
function remember(code: string, js: string, shown: string): string {
  const n = next++;
  kept[n] = { code, js, shown, map: null, codeTokens: null, jsTokens: null };
  keptChars += code.length + js.length;
  while (keptChars > KEEP_CHARS && oldest < n) {
    const old = kept[oldest];
    if (old !== undefined) keptChars -= old.code.length + old.js.length;
    delete kept[oldest++];
  }
  return TS_SCRIPT + n;
}

type Spans = { starts: Int32Array; ends: Int32Array; count: number };

/** A character of an identifier or a number (any non-ASCII one counts). */
export function isWord(c: number): boolean {
  return (c >= 48 && c <= 57) || (c >= 65 && c <= 90) || (c >= 97 && c <= 122) || c === 95 || c === 36 || c > 127;
}
/** A character JavaScript skips between tokens. */
export function isSpace(c: number): boolean {
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
    // Full at 256, 512, ... tokens (how they were made): their length getter is the guest's.
    if (count >= 256 && (count & (count - 1)) === 0) {
      const s = new Int32ArrayCtor(count * 2), e = new Int32ArrayCtor(count * 2);
      Int32Set(s, starts); Int32Set(e, ends);
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

/** The name and position in the TypeScript of a position in its JavaScript, or null. */
function mapPosition(n: number, line: number, column: number): [string, number, number] | null {
  const entry = kept[n];
  if (entry === undefined) return null;
  if (entry.map === null || entry.codeTokens === null || entry.jsTokens === null) {
    entry.codeTokens = tokens(entry.code);
    entry.jsTokens = tokens(entry.js);
    entry.map = align(entry.code, entry.codeTokens, entry.js, entry.jsTokens);
  }
  const sj = entry.jsTokens, sc = entry.codeTokens, map = entry.map;
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
  const at = positionOf(entry.code, sc.starts[map[k]] + inside);
  return [entry.shown, at[0], at[1]];
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
    const replacement = mapped === null ? `${EVAL_SCRIPT}:?:?` : `${mapped[0]}:${mapped[1]}:${mapped[2]}`;
    out += StringSlice(rest, 0, found.index) + replacement;
    rest = StringSlice(rest, found.index + found[0].length);
  }
}
