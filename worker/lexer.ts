// The JavaScript lexer the worker reads guest code with: where its import specifiers are
// (modules.ts), and its import declarations (imports.ts). It skips comments, strings,
// template literals and regular expressions as a JavaScript lexer would, and keeps its
// tokens in typed arrays, which no array method the guest replaces can reach.

import { RegExpExec, StringCharCodeAt, StringIndexOf, StringSlice, uncurry } from "./intrinsics.ts";
import { isSpace, isWord } from "./typescript.ts";

// After these a `/` starts a regular expression, not a division.
export const BEFORE_REGEX = /^(?:return|typeof|instanceof|in|of|new|delete|void|throw|case|do|else|yield|await)$/;

// Statements whose parenthesised head a statement, and so maybe a regular expression, follows.
const HEADS = /^(?:if|while|for|with)$/;

// Token kinds.
export const WORD = 1, PUNCT = 2, STRING = 3, OTHER = 4;

const Int32ArrayCtor = Int32Array;
const Uint8ArrayCtor = Uint8Array;
const Int32Set = uncurry(Int32Array.prototype.set);
const U8Set = uncurry(Uint8Array.prototype.set);

/** The significant tokens of a text, in typed arrays (no guest-reachable array methods):
 * kind, [start, end), how deep each is nested: in braces (template substitutions count as
 * braces) and in parentheses or brackets, its first character, and whether a line break
 * comes before it. */
export type Tokens = {
  kind: Int32Array; start: Int32Array; end: Int32Array; depth: Int32Array; nest: Int32Array;
  first: Int32Array; broken: Uint8Array; count: number;
  room: number; // the arrays' length: a typed array's length getter is the guest's to replace
};

function grown(a: Int32Array, room: number): Int32Array {
  const b = new Int32ArrayCtor(room * 2);
  Int32Set(b, a);
  return b;
}

// What each ASCII character is to the lexer, looked up rather than tested: the lexer runs on
// every eval that awaits, under V8 without a JIT, where a call per character is most of it.
const SPACE = 1, WORDY = 2, BREAK = 3;
const CLASS = new Uint8ArrayCtor(128);
for (let c = 0; c < 128; c++) CLASS[c] = isWord(c) ? WORDY : isSpace(c) ? SPACE : 0;
CLASS[10] = BREAK;
CLASS[13] = BREAK;

export function lex(text: string): Tokens {
  const room = 64;
  const t: Tokens = {
    kind: new Int32ArrayCtor(room), start: new Int32ArrayCtor(room), end: new Int32ArrayCtor(room),
    depth: new Int32ArrayCtor(room), nest: new Int32ArrayCtor(room), first: new Int32ArrayCtor(room),
    broken: new Uint8ArrayCtor(room), count: 0, room,
  };
  const templates: number[] = []; // brace depth at each open ${
  // For each open parenthesis, whether it holds the condition of an if, while, for or with:
  // a `/` after its `)` starts a regular expression (the statement), not a division.
  const heads: number[] = [];
  let headClosed = -1; // the token that closed such a parenthesis
  let depth = 0, nest = 0, i = 0, broke = 0;
  const n = text.length;
  const push = (kind: number, start: number, end: number, c: number) => {
    if (t.count === t.room) {
      t.kind = grown(t.kind, t.room); t.start = grown(t.start, t.room); t.end = grown(t.end, t.room);
      t.depth = grown(t.depth, t.room); t.nest = grown(t.nest, t.room); t.first = grown(t.first, t.room);
      const b = new Uint8ArrayCtor(t.room * 2);
      U8Set(b, t.broken);
      t.broken = b;
      t.room *= 2;
    }
    const k = t.count++;
    t.kind[k] = kind; t.start[k] = start; t.end[k] = end; t.depth[k] = depth; t.nest[k] = nest; t.first[k] = c;
    t.broken[k] = broke;
    broke = 0;
  };
  const lastIs = (s: string) => t.count > 0 && t.kind[t.count - 1] === PUNCT && same(text, t.start[t.count - 1], t.end[t.count - 1], s);
  while (i < n) {
    const c = StringCharCodeAt(text, i);
    const cls = c < 128 ? CLASS[c] : isSpace(c) ? (c === 0x2028 || c === 0x2029 ? BREAK : SPACE) : WORDY;
    if (cls === SPACE) { i++; continue; }
    if (cls === BREAK) { broke = 1; i++; continue; }
    if (cls === WORDY) {
      let j = i + 1;
      for (; j < n; j++) {
        const d = StringCharCodeAt(text, j);
        if (d < 128 ? CLASS[d] !== WORDY : isSpace(d)) break;
      }
      push(WORD, i, j, c);
      i = j;
      continue;
    }
    if (c === 47 /* / */) {
      const d = StringCharCodeAt(text, i + 1);
      if (d === 47) { const e = StringIndexOf(text, "\n", i); i = e < 0 ? n : e; continue; }
      if (d === 42) {
        const e = StringIndexOf(text, "*/", i + 2);
        const stop = e < 0 ? n : e;
        if (broke === 0 && hasBreak(text, i + 2, stop)) broke = 1;
        i = e < 0 ? n : e + 2;
        continue;
      }
      const last = t.count - 1;
      const regex = last < 0 || (t.kind[last] === PUNCT && (!lastIs(")") || headClosed === last) && !lastIs("]")) ||
        (t.kind[last] === WORD && RegExpExec(BEFORE_REGEX, StringSlice(text, t.start[last], t.end[last])) !== null);
      const start = i;
      i = regex ? skipRegex(text, i) : i + 1;
      push(regex ? OTHER : PUNCT, start, i, c);
      continue;
    }
    if (c === 39 || c === 34) { // ' "
      const start = i;
      i = skipString(text, i, c);
      push(STRING, start, i, c);
      continue;
    }
    const closes = c === 125 && templates.length > 0 && templates[templates.length - 1] === depth;
    if (c === 96 || closes) { // ` or the } of a ${
      const start = i;
      if (closes) { templates.length--; depth--; }
      i = skipTemplate(text, i + 1, templates, depth);
      if (i < 0) { i = -i; push(OTHER, start, i, c); depth++; continue; } // stopped at ${
      push(OTHER, start, i, c);
      continue;
    }
    if (c === 125 || c === 41 || c === 93) { // } ) ]
      if (c === 125) depth--; else nest--;
      push(PUNCT, i, i + 1, c);
      if (c === 41 && heads.length > 0) {
        if (heads[heads.length - 1] === 1) headClosed = t.count - 1;
        heads.length--;
      }
    } else {
      if (c === 40) {
        const last = t.count - 1;
        heads[heads.length] = last >= 0 && t.kind[last] === WORD && RegExpExec(HEADS, StringSlice(text, t.start[last], t.end[last])) !== null ? 1 : 0;
      }
      push(PUNCT, i, i + 1, c);
      if (c === 123) depth++;
      else if (c === 40 || c === 91) nest++;
    }
    i++;
  }
  return t;
}

/** Whether text has a line break in [from, to). */
function hasBreak(text: string, from: number, to: number): boolean {
  for (let i = from; i < to; i++) {
    const c = StringCharCodeAt(text, i);
    if (c === 10 || c === 13 || c === 0x2028 || c === 0x2029) return true;
  }
  return false;
}

export function same(text: string, start: number, end: number, s: string): boolean {
  if (end - start !== s.length) return false;
  for (let k = 0; k < s.length; k++) if (StringCharCodeAt(text, start + k) !== StringCharCodeAt(s, k)) return false;
  return true;
}

/** Whether token k of t is the text s. */
export function isText(text: string, t: Tokens, k: number, s: string): boolean {
  return same(text, t.start[k], t.end[k], s);
}

export function skipString(text: string, i: number, quote: number): number {
  let j = i + 1;
  while (j < text.length) {
    const c = StringCharCodeAt(text, j);
    if (c === 92) { j += 2; continue; }
    j++;
    if (c === quote || c === 10) break;
  }
  return j;
}

/** Past a template literal's text from i: the offset after its closing backtick, or minus
 * the offset after a `${` (recorded in templates at the brace depth it opened). */
export function skipTemplate(text: string, i: number, templates: number[], depth: number): number {
  let j = i;
  while (j < text.length) {
    const c = StringCharCodeAt(text, j);
    if (c === 92) { j += 2; continue; }
    if (c === 96) return j + 1;
    if (c === 36 && StringCharCodeAt(text, j + 1) === 123) {
      templates[templates.length] = depth + 1;
      return -(j + 2);
    }
    j++;
  }
  return j;
}

export function skipRegex(text: string, i: number): number {
  let j = i + 1, inClass = false;
  while (j < text.length) {
    const c = StringCharCodeAt(text, j);
    if (c === 92) { j += 2; continue; }
    if (c === 10) return j;
    if (c === 91) inClass = true;
    else if (c === 93) inClass = false;
    else if (c === 47 && !inClass) { j++; break; }
    j++;
  }
  while (j < text.length && isWord(StringCharCodeAt(text, j))) j++; // flags
  return j;
}

