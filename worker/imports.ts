// Static import declarations in evals and Code Mode programs.
//
// An eval is a script, where V8 refuses an import declaration. As Node's REPL does, each
// one at the eval's top level becomes a declaration from a dynamic import, which the rest
// of the eval and later evals see like any top-level const:
//   import d, { a, b as c } from "m"  ->  const { default: d, a, b: c } = await import("m");
//   import * as ns from "m"           ->  const ns = await import("m");
//   import "m"                        ->  const {} = await import("m");
// The import() is then what modules.ts rewrites and refuses like any other, so a
// declaration can import nothing that import() could not. Only tokens change: every line
// stays where it was written, and the edits say how columns moved (the frames of the code
// are mapped back through them, as modules.ts maps its own). Unlike a module's, such a
// binding exists from its declaration on, not from the top of the code.

// deno-lint-ignore-file no-explicit-any
import {
  ObjectCreate,
  RegExpExec,
  StringCharCodeAt,
  StringIndexOf,
  StringSlice,
  TypedArrayLength,
  uncurry,
} from "./intrinsics.ts";
import { lex, PUNCT, same, STRING, WORD } from "./lexer.ts";
import type { Edit } from "./modules.ts";
import { compileError, scriptPosition } from "./typescript.ts";

const Int32ArrayCtor = Int32Array;
const Int32Set = uncurry(Int32Array.prototype.set);

/** code with each import declaration at its top level converted (see above), and the edits
 * (as modules.ts keeps them: line, column in the new text, its length, how much longer);
 * null when it has none. `program`: code is a Code Mode program, whose top level is inside
 * the block (or async function) the host wrapped it in, its first brace. An import
 * declaration that does not parse is a SyntaxError at its place in the script `script`.
 * `ts`: code is TypeScript, converted before its types are stripped (the transpiler would
 * drop an import whose names the code does not use, and refuses one in a block): its
 * type-only imports and names become spaces, and `import x = ...` is left to it. */
export function convertImports(code: string, script: string, program: boolean, ts = false): [string, Edit[]] | null {
  if (StringIndexOf(code, "import") < 0) return null;
  const t = lex(code);
  const word = (k: number, s: string) => k < t.count && t.kind[k] === WORD && same(code, t.start[k], t.end[k], s);
  const punct = (k: number, s: string) => k < t.count && t.kind[k] === PUNCT && same(code, t.start[k], t.end[k], s);
  const text = (k: number) => StringSlice(code, t.start[k], t.end[k]);
  let top = 0, topNest = 0;
  if (program) {
    let k = 0;
    while (k < t.count && !punct(k, "{")) k++;
    if (k === t.count) return null;
    top = 1;
    topNest = t.nest[k];
  }
  const made = changes();
  const change = (k: number, to: string) => addChange(made, t.start[k], t.end[k], to);
  const insert = (at: number, to: string) => addChange(made, at, at, to);
  // Spaces for what is there, its line breaks kept: nothing moves.
  const blank = (start: number, end: number) => {
    let to = "";
    for (let i = start; i < end; i++) {
      const c = StringCharCodeAt(code, i);
      to += c === 10 || c === 13 || c === 0x2028 || c === 0x2029 ? StringSlice(code, i, i + 1) : " ";
    }
    addChange(made, start, end, to);
  };
  const unexpected = (k: number): never => {
    let message = "Unexpected end of input";
    if (k < t.count) {
      message = t.kind[k] === STRING ? "Unexpected string" : t.kind[k] === WORD
        ? `Unexpected identifier '${text(k)}'`
        : `Unexpected token '${text(k)}'`;
    }
    const at = scriptPosition(code, k < t.count ? t.start[k] : code.length);
    throw compileError(message, script, at[0], at[1]);
  };
  for (let k = 0; k < t.count; k++) {
    if (!word(k, "import") || t.depth[k] !== top || t.nest[k] !== topNest) continue;
    if (k > 0 && punct(k - 1, ".")) continue; // a property named import
    if (punct(k + 1, "(") || punct(k + 1, ".")) continue; // import(), import.meta
    let j = k + 1;
    if (j < t.count && t.kind[j] === STRING) { // import "m"
      change(k, "const {} = await import(");
      insert(t.end[j], ");");
      k = attributes(j + 1);
      continue;
    }
    if (ts && word(j, "type") && (punct(j + 1, "{") || punct(j + 1, "*") ||
        (j + 1 < t.count && t.kind[j + 1] === WORD && !word(j + 1, "from")))) { // import type ...
      let e = j + 2;
      while (e < t.count && !(t.kind[e] === STRING && word(e - 1, "from"))) e++;
      if (e === t.count) unexpected(e);
      blank(t.start[k], t.end[e]);
      k = e;
      continue;
    }
    let defaultName = -1, namespace = -1;
    if (j < t.count && t.kind[j] === WORD && !(word(j, "from") && j + 1 < t.count && t.kind[j + 1] === STRING)) {
      defaultName = j++;
      if (ts && punct(j, "=")) continue; // import x = require("m"): TypeScript's own
      if (punct(j, ",")) {
        j++;
        if (!punct(j, "{") && !punct(j, "*")) unexpected(j);
      } else if (!word(j, "from")) unexpected(j);
    }
    change(k, "const ");
    if (punct(j, "*")) {
      if (!word(j + 1, "as")) unexpected(j + 1);
      if (j + 2 >= t.count || t.kind[j + 2] !== WORD) unexpected(j + 2);
      namespace = j + 2;
      if (defaultName >= 0) { // import d, * as ns: d is destructured from ns after it
        change(defaultName, "");
        change(defaultName + 1, "");
      }
      change(j, " ");
      change(j + 1, "  ");
      j += 3;
    } else if (punct(j, "{")) {
      if (defaultName >= 0) {
        change(defaultName, `{ default: ${text(defaultName)},`);
        change(defaultName + 1, "");
        change(j, " ");
      }
      j++;
      for (;;) { // a list of names, each `name`, or `name as local` where name may be a string
        if (punct(j, "}")) break;
        if (j >= t.count || (t.kind[j] !== WORD && t.kind[j] !== STRING)) unexpected(j);
        if (ts && word(j, "type") && j + 1 < t.count && (t.kind[j + 1] === STRING || (t.kind[j + 1] === WORD &&
            !word(j + 1, "as")))) { // { type T as U, ...}: a type's name
          const from = j;
          j += 2;
          if (word(j, "as")) j += 2;
          if (punct(j, ",")) j++;
          blank(t.start[from], t.end[j - 1 < t.count ? j - 1 : t.count - 1]);
          continue;
        }
        const quoted = t.kind[j] === STRING;
        j++;
        if (word(j, "as")) {
          change(j, ": ");
          if (j + 1 >= t.count || t.kind[j + 1] !== WORD) unexpected(j + 1);
          j += 2;
        } else if (quoted) unexpected(j);
        if (punct(j, ",")) { j++; continue; }
        if (!punct(j, "}")) unexpected(j);
      }
      j++;
    } else if (defaultName >= 0) {
      change(defaultName, `{ default: ${text(defaultName)} }`);
    } else {
      unexpected(j);
    }
    if (!word(j, "from")) unexpected(j);
    if (j + 1 >= t.count || t.kind[j + 1] !== STRING) unexpected(j + 1);
    change(j, "= await import(");
    insert(t.end[j + 1], namespace >= 0 && defaultName >= 0
      ? `), { default: ${text(defaultName)} } = ${text(namespace)};`
      : ");");
    k = attributes(j + 2);
  }
  if (made.count === 0) return null;
  return applied(code, made);

  /** After a declaration's specifier, at token k: the last token of the declaration. */
  function attributes(k: number): number {
    if (word(k, "with") && punct(k + 1, "{")) {
      const at = scriptPosition(code, t.start[k]);
      throw compileError(
        "import attributes (with { ... }) are not supported in an eval's import declarations; " +
          "use import(specifier, { with: { ... } })",
        script, at[0], at[1],
      );
    }
    return k - 1;
  }
}

/** Changes to a text, [start, end) of it becoming to, in typed arrays and a prototype-less
 * table: made by the thousand for long code, where a defineProperty per change (what keeps
 * an array's writes from the guest's index setters) was most of the time. */
export type Changes = { start: Int32Array; end: Int32Array; to: { [i: number]: string }; count: number };

export function changes(): Changes {
  return { start: new Int32ArrayCtor(64), end: new Int32ArrayCtor(64), to: ObjectCreate(null), count: 0 };
}

export function addChange(c: Changes, start: number, end: number, to: string): void {
  const k = c.count;
  if (k === TypedArrayLength(c.start)) {
    const s = new Int32ArrayCtor(k * 2), e = new Int32ArrayCtor(k * 2);
    Int32Set(s, c.start);
    Int32Set(e, c.end);
    c.start = s;
    c.end = e;
  }
  c.start[k] = start;
  c.end[k] = end;
  c.to[k] = to;
  c.count = k + 1;
}

const OTHER_BREAKS = /[\r\u2028\u2029]/;

/** The code with the changes made (in the order of their starts, those at one place in the
 * order they were made), and the edits of those that changed a length, as modules.ts keeps
 * them (line, column in the new text, its length, how much longer), in a prototype-less list. */
export function applied(code: string, c: Changes): [string, Edit[]] {
  // Changes are made almost in order: an insertion sort of their indices, stable.
  const order = new Int32ArrayCtor(c.count > 0 ? c.count : 1);
  for (let i = 0; i < c.count; i++) {
    let j = i - 1;
    while (j >= 0 && c.start[order[j]] > c.start[i]) { order[j + 1] = order[j]; j--; }
    order[j + 1] = i;
  }
  const edits: any = ObjectCreate(null);
  let length = 0;
  // Only \n ends a line in most code: then the breaks are found by indexOf, not one by one.
  const onlyNewlines = RegExpExec(OTHER_BREAKS, code) === null;
  let out = "", from = 0, line = 1, lineAt = 0; // lineAt: where the line starts in out
  for (let q = 0; q < c.count; q++) {
    const k = order[q], start = c.start[k], to = c.to[k];
    if (onlyNewlines) {
      for (let i = StringIndexOf(code, "\n", from); i >= 0 && i < start; i = StringIndexOf(code, "\n", i + 1)) {
        line++;
        lineAt = out.length + (i - from) + 1;
      }
    } else {
      for (let i = from; i < start; i++) {
        const ch = StringCharCodeAt(code, i);
        if (ch === 13 && StringCharCodeAt(code, i + 1) === 10) continue;
        if (ch === 10 || ch === 13 || ch === 0x2028 || ch === 0x2029) { line++; lineAt = out.length + (i - from) + 1; }
      }
    }
    out += StringSlice(code, from, start);
    const longer = to.length - (c.end[k] - start);
    if (longer !== 0) edits[length++] = { line, column: out.length - lineAt + 1, now: to.length, longer };
    out += to;
    from = c.end[k];
  }
  edits.length = length;
  return [out + StringSlice(code, from), edits as Edit[]];
}
