// ES modules the host added (rt.add_module), and module programs (rt.eval_module).
//
// Deno resolves an import by itself, from the module's URL; nothing can be added to its
// resolver after start-up. So the worker rewrites: each import of an added specifier, in an
// added module, in a module program or as a literal import() in an eval, becomes the data:
// URL of that module's own (rewritten) JavaScript, which Deno then loads like any data:
// module. What is not added does not resolve: a bare or remote specifier is refused before
// anything loads, with the fix named. Frames in such code name the module's specifier (and
// "guest:module" for a module program) at its positions as written.

// deno-lint-ignore-file no-explicit-any
import {
  lazyGlobal,
  NumberParseInt,
  ObjectCreate,
  ObjectDefineProperty,
  put,
  RegExpExec,
  type Strip,
  StringCharCodeAt,
  StringFn,
  StringIndexOf,
  StringSlice,
  SyntaxErrorCtor,
  TypedArrayLength,
} from "./intrinsics.ts";
import { isText, lex, PUNCT, same, STRING, WORD } from "./lexer.ts";
import { compileError, parseError, stripped } from "./typescript.ts";
import { hasPackages, isPackage, packageUrl } from "./packages.ts";
const JSONStringify = JSON.stringify;
const JSONParse = JSON.parse;
const ObjectKeys = Object.keys;
const TypeErrorCtor = TypeError;
const coreEncode: (s: string) => Uint8Array = (Deno as any)[(Deno as any).internal].core.encode;
const btoaFn = lazyGlobal<(data: string) => string>("btoa");
const atobFn = lazyGlobal<(data: string) => string>("atob");
const coreDecode: (b: Uint8Array) => string = (Deno as any)[(Deno as any).internal].core.decode;
const Uint8ArrayCtor = Uint8Array;

/** The text of a binary string's bytes, as UTF-8. */
function decodeUtf8(binary: string): string {
  const bytes = new Uint8ArrayCtor(binary.length);
  for (let i = 0; i < binary.length; i++) bytes[i] = StringCharCodeAt(binary, i);
  return coreDecode(bytes);
}
const fromCharCode = String.fromCharCode;

// --- The lexer: where a text's import specifiers are ------------------------------------

/** The string literals of `text` that name a module: `import "x"`, `... from "x"`, and
 * `import("x")`, as [start, end) offsets of the literal, quotes included. Comments, strings,
 * template literals and regular expressions are skipped as a JavaScript lexer would. */
export function specifiers(text: string): number[] {
  const found: number[] = [];
  const t = lex(text);
  for (let k = 0; k < t.count; k++) {
    if (t.kind[k] !== STRING || k === 0) continue;
    const prev = k - 1, before = k - 2;
    const word = t.kind[prev] === WORD;
    // Not a member named import or from (`x.from "y"` is no import).
    const dotted = before >= 0 && t.kind[before] === PUNCT && same(text, t.start[before], t.end[before], ".");
    if ((word && !dotted && (isText(text, t, prev, "from") || isText(text, t, prev, "import"))) ||
        (t.kind[prev] === PUNCT && isText(text, t, prev, "(") && before >= 0 && t.kind[before] === WORD &&
          isText(text, t, before, "import"))) {
      found[found.length] = t.start[k];
      found[found.length] = t.end[k];
    }
  }
  return found;
}

// --- The registry -----------------------------------------------------------------------

/** One replaced specifier, in the rewritten text: its line, its column, how much longer. */
export type Edit = { line: number; column: number; now: number; longer: number };

const modules: { [specifier: string]: string } = ObjectCreate(null);
// The data: URL of each added module, built when first imported after the last add_module
// (a module's URL holds the URLs of what it imports, so adding any module may change it).
const urls: { [specifier: string]: { url: string; stamp: number } } = ObjectCreate(null);
/** Frame names of rewritten code: what to show instead, and the edits made to it. */
const named: { [name: string]: { shown: string; edits: Edit[] } } = ObjectCreate(null);
let stamp = 0, programs = 0;
const MODULE_SCRIPT = "guest:module/";
/** What frames in a module program are named. */
const PROGRAM = "guest:module";

export function addModule(specifier: string, source: string): void {
  if (typeof specifier !== "string" || typeof source !== "string") throw new TypeErrorCtor("malformed module");
  modules[specifier] = source;
  stamp++;
}

/** Whether the host added any module or package: only then are evals searched for import(). */
export function hasModules(): boolean {
  return stamp > 0 || hasPackages();
}

// Schemes the guest may import by itself, as from an eval: Deno's own Node modules and
// modules made from the guest's own text.
const OWN = /^(?:node|data|blob):/;

const REMOTE = /^[A-Za-z][A-Za-z0-9+.-]*:/;
// The sandbox's account of an import it cannot load, in the program's terms (the host reads
// these exact words: pydeno/_base/kinds.py's import_refused). What the host may do about it
// (add_module) is the operator's, and the exception's note says it.
const REASONS: { [scheme: string]: string } = {
  "npm:": "npm packages are not available",
  "jsr:": "jsr packages are not available",
  "http:": "remote modules are not available",
  "https:": "remote modules are not available",
  "file:": "files are not available",
};
const NOT_ADDED = "it was not added; only added modules, packages the host provided (packages=) and node: built-ins " +
  "can be imported";
const IN_THE_SANDBOX = " cannot be imported in this sandbox: ";

/** The message for an import of what was not added (Deno's own, for a computed
 * specifier, is rewritten to it too: see unresolved). */
export function notAddedMessage(specifier: string): string {
  const scheme = RegExpExec(REMOTE, specifier);
  const reason = scheme === null ? NOT_ADDED : (REASONS[scheme[0]] ?? "remote modules are not available");
  return `module ${JSONStringify(specifier)}${IN_THE_SANDBOX}${reason}`;
}

function notAdded(specifier: string): never {
  throw new TypeErrorCtor(notAddedMessage(specifier));
}

const DENO_UNRESOLVED = /^(?:Import "(.*)" not a dependency|Relative import path "(.*)" not prefixed with \/ or \.\/ or \.\.\/|Module not found "(.*)")/;
// Deno's module loader refusing what the worker's flags forbid: its words name those flags.
const DENO_NO_NPM = /^npm specifiers were requested; but --no-npm is specified/;
const DENO_NO_JSR = /^JSR package manifest for '([^']*)' failed to load\. /;
const DENO_NO_REMOTE = /^A remote specifier was requested: "(.*)", but --no-remote is specified/;
const DENO_NO_ACCESS = /^Requires (read|import) access to "(.*)", /;

/** For the message of an error Deno's module loader threw (a specifier it cannot resolve or
 * may not load), the sandbox's own message; null for any other message. A TypeError is what
 * the loader throws; the same permission words on another error are not an import's. */
export function unresolved(message: string, name: string): string | null {
  const found = RegExpExec(DENO_UNRESOLVED, message);
  if (found !== null) {
    const specifier = found[1] ?? found[2] ?? found[3];
    return typeof specifier === "string" ? notAddedMessage(specifier) : null;
  }
  if (RegExpExec(DENO_NO_NPM, message) !== null) return "npm packages cannot be imported in this sandbox";
  const jsr = RegExpExec(DENO_NO_JSR, message);
  if (jsr !== null) return notAddedMessage("jsr:" + jsr[1]);
  const remote = RegExpExec(DENO_NO_REMOTE, message);
  if (remote !== null) return notAddedMessage(remote[1]);
  const access = name === "TypeError" ? RegExpExec(DENO_NO_ACCESS, message) : null;
  if (access !== null) {
    return `module ${JSONStringify(access[2])}${IN_THE_SANDBOX}` +
      (access[1] === "read" ? REASONS["file:"] : REASONS["https:"]);
  }
  return null;
}

function base64(text: string): string {
  const bytes = coreEncode(text);
  const n = TypedArrayLength(bytes);
  let binary = "";
  for (let i = 0; i < n; i += 0x8000) {
    let chunk = "";
    const end = i + 0x8000 < n ? i + 0x8000 : n;
    for (let j = i; j < end; j++) chunk += fromCharCode(bytes[j]);
    binary += chunk;
  }
  return btoaFn()(binary);
}

/** text with each import of an added module or package replaced by its URL; edits says
 * where. strip is null only where no module was added (so only packages are). */
function rewrite(strip: Strip | null, text: string, edits: Edit[], chain: string[]): string {
  const spans = specifiers(text);
  if (spans.length === 0) return text;
  let out = "", from = 0, line = 1, lineAt = 0;
  for (let k = 0; k < spans.length; k += 2) {
    const start = spans[k], end = spans[k + 1];
    let specifier: any;
    try { specifier = JSONParse(quoted(StringSlice(text, start, end))); } catch { continue; }
    if (typeof specifier !== "string") continue;
    let url: string;
    if (modules[specifier] !== undefined) url = urlOf(strip!, specifier, chain);
    else if (isPackage(specifier)) url = packageUrl(specifier, dataUrl);
    else if (RegExpExec(OWN, specifier) !== null) continue;
    else notAdded(specifier);
    const replacement = JSONStringify(url);
    const before = StringSlice(text, from, start);
    for (let i = StringIndexOf(before, "\n"); i >= 0; i = StringIndexOf(before, "\n", i + 1)) {
      line++;
      lineAt = out.length + i + 1;
    }
    out += before;
    edits[edits.length] = { line, column: out.length - lineAt + 1, now: replacement.length, longer: replacement.length - (end - start) };
    out += replacement;
    from = end;
  }
  return out + StringSlice(text, from);
}

/** A single-quoted literal as JSON (double quotes), for JSON.parse. */
function quoted(literal: string): string {
  if (StringCharCodeAt(literal, 0) === 34) return literal;
  const body = StringSlice(literal, 1, literal.length - 1);
  let out = "\"";
  for (let i = 0; i < body.length; i++) {
    const c = StringCharCodeAt(body, i);
    if (c === 92 && StringCharCodeAt(body, i + 1) === 39) { out += "'"; i++; continue; }
    if (c === 34) { out += "\\\""; continue; }
    out += fromCharCode(c);
  }
  return out + "\"";
}

function urlOf(strip: Strip, specifier: string, chain: string[]): string {
  const known = urls[specifier];
  if (known !== undefined && known.stamp === stamp) return known.url;
  for (let i = 0; i < chain.length; i++) {
    if (chain[i] === specifier) {
      throw new TypeErrorCtor(
        `modules import each other in a circle (${JSONStringify(specifier)}): added modules cannot, ` +
          "each is loaded from its own text",
      );
    }
  }
  chain[chain.length] = specifier;
  const url = build(strip, modules[specifier], specifier, chain);
  chain.length--;
  urls[specifier] = { url, stamp };
  return url;
}

function build(strip: Strip, source: string, shown: string, chain: string[]): string {
  const edits: Edit[] = [];
  const body = rewrite(strip, javascript(strip, source, shown), edits, chain);
  return dataUrl(body + "\n//# sourceURL=" + nameFor(body, shown, edits));
}

function dataUrl(text: string): string {
  return "data:text/javascript;base64," + base64(text);
}

// The frame name of each rewritten text. One name per text, so the same text always gives
// the same URL and Deno loads (and evaluates) it once: a module rebuilt because another was
// added keeps its URL, and with it its one instance, when its own text did not change.
const names: { [text: string]: string } = ObjectCreate(null);

function nameFor(text: string, shown: string, edits: Edit[]): string {
  return named_(shown + "\0" + text, shown, edits);
}

/** nameFor's name under its key. */
function named_(key: string, shown: string, edits: Edit[]): string {
  let name = names[key];
  if (name === undefined) {
    name = MODULE_SCRIPT + (++programs);
    names[key] = name;
    named[name] = { shown, edits };
  }
  return name;
}

/** A module's JavaScript: its TypeScript types stripped, positions kept. */
function javascript(strip: Strip, source: string, shown: string): string {
  try {
    return stripped(strip, source);
  } catch { /* stripping says only that it failed; the transform says where a syntax error is */ }
  throw parseError(strip, source, shown, `${shown}: `) ?? new SyntaxErrorCtor(
    `${shown}: the module needs more than its types stripped (enums, namespaces and parameter ` +
      "properties are not supported in modules)",
  );
}

/** The URL of a module program's rewritten JavaScript. */
export function programUrl(strip: Strip, source: string): string {
  return build(strip, source, PROGRAM, []);
}

/** An eval's code with its literal import() of added modules rewritten, and the name to
 * evaluate it under ("" when nothing changed: then it is the code itself). `earlier`: the
 * edits that made code from what was written (its import declarations converted, see
 * imports.ts), which frames are mapped back through too. */
export function rewriteEval(strip: Strip | null, code: string, shown: string, earlier: Edit[] = []): [string, string] {
  const edits: Edit[] = [];
  const out = rewrite(strip, code, edits, []);
  if (edits.length === 0 && earlier.length === 0) return [code, ""];
  if (earlier.length === 0) return [out, nameFor(out, shown, edits)];
  return [out, editedName(out, shown, merged(earlier, edits))];
}

/** The name of a text made by `edits` from code whose frames are named `shown`: frames and
 * compile errors under it are mapped back to the code as written. */
export function editedName(text: string, shown: string, edits: Edit[]): string {
  // The same text may come from code written two ways: the name is per text and edits.
  let key = text + "\0";
  for (let k = 0; k < edits.length; k++) {
    const e = edits[k];
    key += `${e.line},${e.column},${e.now},${e.longer};`;
  }
  return nameFor(key, shown, edits);
}

// The names of rewritten evals (repl.ts) are many, one per eval of new code: only the latest,
// within a character budget and a count, keep their mapping (a frame of an older one shows
// its own name and place), so that a long-lived runtime keeps a bounded amount for this.
const KEEP_CHARS = 4 << 20, KEEP_NAMES = 1024;
const evalKeys: { [n: number]: string } = ObjectCreate(null);
let evalKeysChars = 0, oldestKey = 0, nextKey = 0;

/** The name of an eval's text rewritten by `edits` from code whose frames are named `shown`,
 * mapped back like editedName's while it is among the latest. */
export function evalName(text: string, shown: string, edits: Edit[]): string {
  const key = shown + "\0" + text;
  const known = names[key];
  if (known !== undefined) return known;
  const name = named_(key, shown, edits);
  evalKeys[nextKey++] = key;
  evalKeysChars += key.length;
  while ((evalKeysChars > KEEP_CHARS || nextKey - oldestKey > KEEP_NAMES) && oldestKey < nextKey - 1) {
    const old = evalKeys[oldestKey];
    delete evalKeys[oldestKey++];
    evalKeysChars -= old.length;
    delete named[names[old]];
    delete names[old];
  }
  return name;
}

/** One list of edits, in the final text, from two in a row: `first` made the middle text
 * (its columns there), `then` the final one from it (its columns in the final text). They
 * never overlap: `then` replaces only specifiers, which `first` keeps as written. */
function merged(first: Edit[], then: Edit[]): Edit[] {
  const out: Edit[] = [];
  let i = 0, j = 0, line = 0, shift = 0; // shift: what `then` added on this line so far
  while (i < first.length || j < then.length) {
    const a = i < first.length ? first[i] : undefined, b = j < then.length ? then[j] : undefined;
    const next = a === undefined ? b!.line : b === undefined ? a.line : (a.line < b.line ? a.line : b.line);
    if (next !== line) { line = next; shift = 0; }
    // b's column in the middle text is its final column less what `then` added before it.
    if (b !== undefined && b.line === line && (a === undefined || a.line !== line || b.column - shift <= a.column)) {
      put(out, b);
      shift += b.longer;
      j++;
    } else {
      const moved = { line: a!.line, column: a!.column + shift, now: a!.now, longer: a!.longer };
      put(out, moved);
      i++;
    }
  }
  return out;
}

/** The module namespace's exports as a plain object. */
export function exportsOf(namespace: any): any {
  const out: any = {};
  const keys = ObjectKeys(namespace);
  for (let i = 0; i < keys.length; i++) {
    ObjectDefineProperty(out, keys[i], { __proto__: null, value: namespace[keys[i]], enumerable: true, writable: true, configurable: true } as PropertyDescriptor);
  }
  return out;
}

// --- Frames -----------------------------------------------------------------------------

// Deno's loader reports a module that V8 would not compile by its URL, after the message: a
// data: URL the first time (its base64 the whole text), the name in its sourceURL after.
const NOT_COMPILED = / at (?:data:text\/javascript;base64,([A-Za-z0-9+\/=]*)|(guest:module\/\d+)):(\d+):(\d+)$/;
const SOURCE_URL = /\n\/\/# sourceURL=(guest:module\/\d+)$/;

/** For a SyntaxError Deno's loader gave a rewritten module that did not compile, the same
 * error at its place in that module (a frame mapModuleStack maps to the code as written);
 * any other error as it is. */
export function moduleCompileError(e: any): any {
  let message = "";
  try {
    if (!(e instanceof SyntaxErrorCtor)) return e;
    message = StringFn(e.message);
  } catch { return e; }
  const found = RegExpExec(NOT_COMPILED, message);
  if (found === null) return e;
  let name: string | undefined = found[2];
  if (name === undefined) {
    let text = "";
    try { text = decodeUtf8(atobFn()(found[1])); } catch { return e; }
    name = RegExpExec(SOURCE_URL, text)?.[1];
  }
  if (name === undefined || named[name] === undefined) return e;
  return compileError(StringSlice(message, 0, found.index), name, NumberParseInt(found[3], 10), NumberParseInt(found[4], 10));
}

const FRAME = /guest:module\/(\d+):(\d+):(\d+)/;

/** Whether name is that of a rewritten text whose frames are mapped back. */
export function isRewritten(name: string): boolean {
  return named[name] !== undefined;
}

/** Where a position in a rewritten text (by its name) was written: the name frames in that
 * code show, line and column; through every rewrite that made it. */
export function asWritten(name: string, line: number, column: number): [string, number, number] {
  for (let entry = named[name]; entry !== undefined; entry = named[name]) {
    // Each change before the column on its line moved it right; a position inside an inserted
    // or replaced text is where that text stands.
    let shift = 0, inside = -1;
    for (let k = 0; k < entry.edits.length; k++) {
      const e = entry.edits[k];
      if (e.line !== line || e.column > column) continue;
      if (column < e.column + e.now) { inside = e.column; break; }
      shift += e.longer;
    }
    column = (inside >= 0 ? inside : column) - shift;
    if (column < 1) column = 1;
    name = entry.shown;
  }
  return [name, line, column];
}

/** A stack whose frames in rewritten code name the module and its positions as written. */
export function mapModuleStack(stack: string): string {
  if (StringIndexOf(stack, MODULE_SCRIPT) < 0) return stack;
  let out = "", rest = stack;
  for (;;) {
    const found = RegExpExec(FRAME, rest);
    if (found === null) return out + rest;
    const at = asWritten(MODULE_SCRIPT + found[1], NumberParseInt(found[2], 10), NumberParseInt(found[3], 10));
    out += StringSlice(rest, 0, found.index) + `${at[0]}:${at[1]}:${at[2]}`;
    rest = StringSlice(rest, found.index + found[0].length);
  }
}
