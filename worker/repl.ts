// What an eval with top-level await means, without V8's REPL mode.
//
// A classic script cannot await, and an async function's declarations end with it. So an eval
// whose code says `await` (and every eval of a guest that poisoned what evalContext reads, see
// main.ts) is rewritten to the body of an async arrow function, which the worker creates by a
// classic script of its own and calls, with what a script would have made global made global:
//   - A `var` anywhere outside a function, and a function declared at the top level, are
//     declared by a classic script first (global and non-configurable, as a script's are);
//     the var's initialiser becomes an assignment where it was, and the function is assigned
//     to its global as the body starts (it is still hoisted within the body).
//   - A `let`, `const` or `class` at the top level is declared as the declaration runs: its
//     names are bound on a fresh object, then declared by a classic script of their own as
//     script-scope lets (main.ts), so later evals see them as they would a script's, and a
//     use before the declaration is a ReferenceError. Declared again by a later eval, the
//     name is assigned instead, as V8's REPL mode allows.
//   - Every expression statement outside a function records its value, and an if, a loop, a
//     switch, a try or a with, standing in a list of statements, starts from undefined, so the
//     eval's value is its completion value, as a script's is (a finally gives none).
// Statements are found by a statement-level parse of the lexer's tokens (lexer.ts): brackets
// are matched, and where no semicolon ends a statement, a line break ends it unless the next
// token could continue it, as automatic semicolon insertion does. Expressions are never
// parsed beyond that, and function and class bodies are skipped whole.
//
// Every change is an insertion or a replacement on one line: lines stay where they were, and
// the edits say how columns moved, so frames map back to the code as written (modules.ts).

import { ObjectCreate, put, RegExpExec, StringCharCodeAt, StringSlice } from "./intrinsics.ts";
import { addChange, applied, changes } from "./imports.ts";
import { isText, lex, OTHER, PUNCT, STRING, type Tokens, WORD } from "./lexer.ts";
import type { Edit } from "./modules.ts";

const Int32ArrayCtor = Int32Array;


/** The names the rewritten body uses: its completion value, the object its lexical names are
 * bound on, the function that declares them, and the one that makes its functions global. */
export type Names = { completion: string; bound: string; declare: string; functions: string };

export type Rewrite = {
  /** The body, and the edits that made it from the code. */
  body: string;
  edits: Edit[];
  /** The names of each top-level lexical declaration, by the index the body declares it by. */
  lexical: string[][];
  /** Every var name, and each top-level function's name, to declare before the body runs. */
  vars: string[];
  /** The top-level functions, in the order the body hands them over. */
  functions: string[];
  /** A mistake the scripts would refuse that the body would not: its message and offset. */
  error: [string, number] | null;
};

// Words that carry an expression over a line break, and words that are no label.
const OPERAND_WORDS = /^(?:typeof|instanceof|in|of|new|delete|void|await)$/;
const KEYWORDS = /^(?:break|case|catch|class|const|continue|debugger|default|delete|do|else|export|extends|finally|for|function|if|import|in|instanceof|new|return|super|switch|this|throw|try|typeof|var|void|while|with|yield|let|static|enum|await|null|true|false)$/;

/** The code's statements rewritten as described above. */
export function rewrite(code: string, n: Names): Rewrite {
  const t: Tokens = lex(code);
  const count = t.count;
  const made = changes();
  const lexical: string[][] = [];
  const vars: string[] = [];
  const functions: string[] = [];
  let error: [string, number] | null = null;
  // The top level's names: a name declared twice, unless as var (or function) both times, is
  // an error, as in a script.
  const declared: { [name: string]: boolean } = ObjectCreate(null); // true: lexical

  // The matching bracket of each opener and closer (-1: none).
  const match = new Int32ArrayCtor(count > 0 ? count : 1);
  {
    const stack = new Int32ArrayCtor(count > 0 ? count : 1);
    let top = 0;
    for (let k = 0; k < count; k++) {
      match[k] = -1;
      const kind = t.kind[k];
      if (kind === WORD || kind === STRING) continue;
      const c = t.first[k];
      if (kind === PUNCT) {
        if (c === 40 || c === 91 || c === 123) { stack[top++] = k; continue; }
        if (c !== 41 && c !== 93 && c !== 125) continue;
      } else if (c !== 96 && c !== 125) continue; // a regular expression
      const closes = kind === PUNCT || c === 125; // a closer, or the } that ends a template substitution
      if (closes) {
        if (top === 0) {
          if (error === null) error = [`Unexpected token '${StringSlice(code, t.start[k], t.start[k] + 1)}'`, t.start[k]];
        } else {
          const open = stack[--top];
          match[open] = k;
          match[k] = open;
        }
      }
      if (kind === OTHER && t.end[k] - t.start[k] >= 2 && StringCharCodeAt(code, t.end[k] - 1) === 123 &&
          StringCharCodeAt(code, t.end[k] - 2) === 36) stack[top++] = k; // `...${ or }...${
    }
  }

  const ch = (k: number) => (k < count ? t.first[k] : -1);
  const punct = (k: number, c: number) => k < count && t.kind[k] === PUNCT && t.first[k] === c;
  const word = (k: number, s: string) => k < count && t.kind[k] === WORD && isText(code, t, k, s);
  // A word as a keyword: not a property's name (after a dot, or before a colon in a literal).
  const keyword = (k: number, s: string) => word(k, s) && !punct(k - 1, 46) && !punct(k + 1, 58);
  const text = (k: number) => StringSlice(code, t.start[k], t.end[k]);
  const adjacent = (k: number) => k > 0 && t.start[k] === t.end[k - 1];
  const change = (start: number, end: number, to: string) => addChange(made, start, end, to);
  const insert = (at: number, to: string) => addChange(made, at, at, to);
  const fail = (message: string, k: number) => { if (error === null) error = [message, k < count ? t.start[k] : code.length]; };
  /** Declares the name at token k, lexical or not. */
  const declare = (k: number, lexical: boolean) => {
    const name = text(k), was = declared[name];
    if (was === true || (was === false && lexical)) fail(`Identifier '${name}' has already been declared`, k);
    if (was !== true) declared[name] = lexical;
  };

  /** Whether a line break lies between token k - 1 and token k. */
  const breakBefore = (k: number) => k > 0 && k < count && t.broken[k] === 1;

  /** Whether token p (the last of an expression so far) leaves it wanting an operand. */
  function wantsOperand(p: number): boolean {
    if (t.kind[p] === WORD) return RegExpExec(OPERAND_WORDS, text(p)) !== null;
    if (t.kind[p] !== PUNCT) return false;
    const c = ch(p);
    if (c === 41 || c === 93 || c === 125) return false; // ) ] }
    if ((c === 43 || c === 45) && adjacent(p) && ch(p - 1) === c) {
      // ++ or --: postfix when it follows a value on its line, so the expression is whole.
      const before = p - 2;
      if (before >= 0 && !breakBefore(p - 1) && (t.kind[before] !== PUNCT || ch(before) === 41 || ch(before) === 93)) return false;
    }
    return true;
  }

  /** Whether token k, after a line break, continues the expression whose last token is p. */
  function continues(p: number, k: number): boolean {
    if (wantsOperand(p)) return true;
    // An arrow function's block body ends its expression: nothing can call or index it.
    if (punct(p, 125) && match[p] >= 0 && functionBody(match[p]) && !punct(match[p] - 1, 41)) return false;
    if (t.kind[k] === WORD) return word(k, "in") || word(k, "instanceof");
    if (t.kind[k] === STRING) return false;
    if (t.kind[k] === OTHER) return ch(k) === 96; // a tagged template; a regex cannot follow a value
    const c = ch(k);
    if ((c === 43 || c === 45) && k + 1 < count && adjacent(k + 1) && ch(k + 1) === c) return false; // ++ --
    return !(c === 33 || c === 126 || c === 123 || c === 125 || c === 59 || c === 41 || c === 93); // ! ~ { } ; ) ]
  }

  /** Whether the { at k opens a function's body: after the ) of its parameters, or after =>. */
  function functionBody(k: number): boolean {
    return punct(k - 1, 41) || (punct(k - 1, 62) && adjacent(k - 1) && punct(k - 2, 61));
  }

  /** From the `function` or `class` at k: the last token of its body. */
  function skipFunctionOrClass(k: number): number {
    let j = k + 1;
    while (j < count && !punct(j, 123)) {
      if (punct(j, 40) || punct(j, 91)) { j = match[j] < 0 ? count : match[j] + 1; continue; }
      j++;
    }
    return j < count && match[j] >= 0 ? match[j] : count;
  }

  /** The first token after the expression starting at k: it stops at a semicolon, at a closer
   * of what it is in, at a line break that ends it, and (as asked) at a comma, at `in`/`of`, or
   * at a case's colon. */
  function expressionEnd(k: number, comma: boolean, forHead = false, colon = false): number {
    let questions = 0;
    let j = k;
    for (; j < count; j++) {
      if (j > k && t.broken[j] === 1 && !continues(j - 1, j)) return j;
      const kind = t.kind[j];
      if (kind === WORD) {
        // Only these words matter here; their first letters spare the rest a comparison.
        const first = t.first[j];
        if ((first === 102 || first === 99) && (keyword(j, "function") || keyword(j, "class"))) {
          j = skipFunctionOrClass(j);
        } else if (forHead && (first === 105 || first === 111) && (word(j, "in") || word(j, "of"))) return j;
        continue;
      }
      if (kind === STRING) continue;
      const c = ch(j);
      if ((kind === PUNCT && (c === 40 || c === 91 || c === 123)) || (kind === OTHER && match[j] > j)) {
        // Brackets, a literal's braces or a template's substitutions: skipped whole.
        let open = j;
        for (;;) {
          const close = match[open];
          if (close < open) return count;
          j = close;
          if (t.kind[close] === OTHER && match[close] > close) { open = close; continue; }
          break;
        }
        continue;
      }
      if (kind === PUNCT && (c === 41 || c === 93 || c === 125)) return j;
      if (kind !== PUNCT) continue;
      if (c === 59) return j;
      if (comma && c === 44) return j;
      if (c === 63 && !(punct(j + 1, 46) && adjacent(j + 1)) && !(punct(j + 1, 63) && adjacent(j + 1)) &&
          !(punct(j - 1, 63) && adjacent(j))) questions++;
      if (c === 58) {
        if (questions > 0) questions--;
        else if (colon) return j;
      }
    }
    return j;
  }

  /** Binds the names of the pattern at k (a name, or an object or array pattern) and returns
   * the token after it; `bind` is told each name's token and whether it is an object's
   * shorthand property. */
  function pattern(k: number, bind: (k: number, shorthand: boolean) => void): number {
    if (k < count && t.kind[k] === WORD) { bind(k, false); return k + 1; }
    if (punct(k, 91)) { // [ a, , b = 1, ...c ]
      const end = match[k] < 0 ? count : match[k];
      let j = k + 1;
      while (j < end) {
        if (punct(j, 44)) { j++; continue; }
        if (punct(j, 46) && punct(j + 1, 46) && punct(j + 2, 46)) j += 3;
        j = pattern(j, bind);
        if (punct(j, 61)) j = expressionEnd(j + 1, true);
        if (punct(j, 44)) j++;
        else if (j < end) { fail(`Unexpected token '${text(j)}'`, j); return end + 1; }
      }
      return end + 1;
    }
    if (punct(k, 123)) { // { a, b: c, [k]: d = 1, ...e }
      const end = match[k] < 0 ? count : match[k];
      let j = k + 1;
      while (j < end) {
        if (punct(j, 46) && punct(j + 1, 46) && punct(j + 2, 46)) { j = pattern(j + 3, bind); }
        else {
          let key = j;
          if (punct(j, 91)) j = (match[j] < 0 ? count : match[j]) + 1;
          else j++;
          if (punct(j, 58)) j = pattern(j + 1, bind);
          else if (t.kind[key] === WORD) bind(key, true);
          else { fail(`Unexpected token '${text(j)}'`, j); return end + 1; }
          key = -1;
          if (punct(j, 61)) j = expressionEnd(j + 1, true);
        }
        if (punct(j, 44)) j++;
        else if (j < end) { fail(`Unexpected token '${text(j)}'`, j); return end + 1; }
      }
      return end + 1;
    }
    fail(k < count ? `Unexpected token '${text(k)}'` : "Unexpected end of input", k);
    return k + 1;
  }

  /** Declarators from k to the end of their list: each pattern, then its initialiser if any.
   * Returns the first token after the list. */
  function declarators(k: number, bind: (k: number, shorthand: boolean) => void, each: (last: number, init: boolean) => void, forHead: boolean): number {
    let j = k;
    for (;;) {
      j = pattern(j, bind);
      let init = false;
      if (punct(j, 61) && !(punct(j + 1, 61) && adjacent(j + 1))) { init = true; j = expressionEnd(j + 1, true, forHead); }
      each(j, init);
      if (punct(j, 44)) { j++; continue; }
      return j;
    }
  }

  /** After a statement's last token (before j): where it ends, its semicolon included. With
   * no semicolon, only a line break, a closing brace or the end may end it. */
  function ended(j: number): number {
    if (punct(j, 59)) return j + 1;
    if (j < count && !punct(j, 125) && !breakBefore(j)) unexpected(j);
    return j;
  }

  const C = n.completion, T = n.bound;
  const RESET = `${C}=void 0;`;

  /** The statements from k to `end` (a token index). top: the eval's own top level. */
  function statements(k: number, end: number, top: boolean, record: boolean): number {
    while (k < end) k = statement(k, top, record, true, -1);
    return k;
  }

  /** The statement at k; returns the token after it. list: it stands in a list of statements
   * (not as the body of an if, a loop or a label); labels: where its labels start. */
  function statement(k: number, top: boolean, record: boolean, list: boolean, labels: number): number {
    const start = labels >= 0 ? labels : k;
    // A statement whose value is "empty" when its body's is: the value so far goes first.
    const reset = () => { if (record && list) insert(t.start[start], RESET); };
    if (punct(k, 59)) return k + 1;
    if (punct(k, 123)) return block(k, record);
    if (k < count && t.kind[k] === WORD) {
      // The statement's first word, compared as a string: one slice, no call per keyword.
      const w = text(k);
      if (punct(k + 1, 58) && RegExpExec(KEYWORDS, w) === null) return statement(k + 2, top, record, list, start);
      if (w === "var") return varStatement(k, list);
      if ((w === "let" && ((t.kind[k + 1] === WORD && !word(k + 1, "in") && !word(k + 1, "instanceof")) ||
          punct(k + 1, 91) || punct(k + 1, 123))) || w === "const") {
        if (top) return lexicalStatement(k);
        return ended(declarators(k + 1, () => {}, () => {}, false));
      }
      if (w === "class") {
        const close = skipFunctionOrClass(k);
        if (top && k + 1 < count && t.kind[k + 1] === WORD && !word(k + 1, "extends")) {
          const names: string[] = [];
          put(names, text(k + 1));
          declare(k + 1, true);
          const index = lexical.length;
          put(lexical, names);
          change(t.start[k], t.end[k], `;(${T}.${text(k + 1)}=class`);
          insert(close < count ? t.end[close] : code.length, `,${n.declare}(${index}));`);
        }
        return close + 1;
      }
      if (w === "function" || (w === "async" && word(k + 1, "function") && !breakBefore(k + 1))) {
        let j = w === "async" ? k + 2 : k + 1;
        if (punct(j, 42)) j++;
        if (top && j < count && t.kind[j] === WORD) { put(functions, text(j)); put(vars, text(j)); declare(j, false); }
        return skipFunctionOrClass(k) + 1;
      }
      if (w === "if") {
        reset();
        let j = statement(parenthesised(k + 1), false, record, false, -1);
        if (word(j, "else")) j = statement(j + 1, false, record, false, -1);
        return j;
      }
      if (w === "for") {
        reset();
        let j = k + 1;
        if (word(j, "await")) j++;
        if (!punct(j, 40)) { unexpected(j); return count; }
        const close = match[j] < 0 ? count : match[j];
        if (word(j + 1, "var")) {
          change(t.start[j + 1], t.end[j + 1], "   ");
          declarators(j + 2, (b) => { put(vars, text(b)); declare(b, false); }, () => {}, true);
        }
        return statement(close + 1, false, record, false, -1);
      }
      if (w === "while" || w === "with") {
        reset();
        return statement(parenthesised(k + 1), false, record, false, -1);
      }
      if (w === "do") {
        reset();
        let j = statement(k + 1, false, record, false, -1);
        if (word(j, "while")) j = parenthesised(j + 1);
        return punct(j, 59) ? j + 1 : j; // a do-while needs no line break after it
      }
      if (w === "switch") {
        reset();
        const j = parenthesised(k + 1);
        if (!punct(j, 123)) { unexpected(j); return count; }
        const close = match[j] < 0 ? count : match[j];
        let c = j + 1;
        while (c < close) {
          if (word(c, "case")) { c = expressionEnd(c + 1, false, false, true) + 1; continue; }
          if (word(c, "default") && punct(c + 1, 58)) { c += 2; continue; }
          c = statement(c, false, record, true, -1);
        }
        return close + 1;
      }
      if (w === "try") {
        reset();
        let j = block(k + 1, record);
        if (word(j, "catch")) {
          j++;
          if (punct(j, 40)) j = (match[j] < 0 ? count : match[j]) + 1;
          j = block(j, record);
        }
        if (word(j, "finally")) j = block(j + 1, false);
        return j;
      }
      if (w === "return") { fail("Illegal return statement", k); return count; }
      if (w === "break" || w === "continue" || w === "debugger") {
        let j = k + 1;
        if (j < count && t.kind[j] === WORD && !breakBefore(j)) j++;
        return ended(j);
      }
      if (w === "throw") return ended(expressionEnd(k + 1, false));
      if ((w === "import" && !punct(k + 1, 40) && !punct(k + 1, 46)) || w === "export") {
        return ended(expressionEnd(k + 1, false)); // left as written, for V8 to refuse
      }
    }
    // An expression statement: its value is recorded.
    const e = expressionEnd(k, false);
    if (e === k) { unexpected(k); return k + 1; }
    if (record) {
      insert(t.start[k], `${C}=(`);
      insert(t.end[e - 1], ")");
    }
    return ended(e);
  }

  function unexpected(k: number): void {
    fail(k < count ? `Unexpected token '${text(k)}'` : "Unexpected end of input", k);
  }

  function parenthesised(k: number): number {
    if (!punct(k, 40)) { unexpected(k); return count; }
    return (match[k] < 0 ? count : match[k]) + 1;
  }

  function block(k: number, record: boolean): number {
    if (!punct(k, 123)) { unexpected(k); return count; }
    const close = match[k] < 0 ? count : match[k];
    statements(k + 1, close, false, record);
    return close + 1;
  }

  /** The end of a statement we rewrote into an expression statement, whose last token is
   * before `end`: a semicolon unless the code has one there. */
  function close(end: number, to: string): number {
    insert(t.end[end - 1], punct(end, 59) ? to : to + ";");
    return ended(end);
  }

  /** `var a = 1, {b} = c` at k: `;(a = 1, {b} = c);`, its names declared before the body. A
   * declarator without an initialiser is left out (its name becomes 0). In a list a semicolon
   * first, so that the statement before does not run on into the parenthesis. */
  function varStatement(k: number, list: boolean): number {
    change(t.start[k], t.end[k], list ? ";(" : "(");
    const end = declarators(k + 1, (b) => { put(vars, text(b)); declare(b, false); }, (last, init) => {
      if (!init) change(t.start[last - 1], t.end[last - 1], "0");
    }, false);
    return close(end, ")");
  }

  /** `let a = 1, {b, c: [d]} = e` at k (or const): `;(T.a = 1,declare(i), {b: T.b, c: [T.d]}
   * = e,declare(i + 1));`: each declarator's names are bound on T, then declared, so that the
   * next declarator sees them. */
  function lexicalStatement(k: number): number {
    const isConst = word(k, "const");
    change(t.start[k], t.end[k], ";(");
    let names: string[] = [];
    const end = declarators(k + 1, (b, shorthand) => {
      put(names, text(b));
      declare(b, true);
      insert(t.start[b], shorthand ? `${text(b)}:${T}.` : `${T}.`);
    }, (last, init) => {
      if (!init) {
        if (isConst) fail("Missing initializer in const declaration", last);
        else insert(t.end[last - 1], "=void 0");
      }
      insert(t.end[last - 1], `,${n.declare}(${lexical.length})`);
      put(lexical, names);
      names = [];
    }, false);
    return close(end, ")");
  }

  // A directive prologue ("use strict") stays first, as written, and gives no value.
  let first = 0;
  while (first < count && t.kind[first] === STRING && (punct(first + 1, 59) || first + 1 === count || breakBefore(first + 1))) {
    first = punct(first + 1, 59) ? first + 2 : first + 1;
  }
  insert(first < count ? t.start[first] : code.length, ""); // change 0: the prologue, below
  statements(first, count, true, true);
  if (functions.length > 0) {
    let list = "";
    for (let i = 0; i < functions.length; i++) list += (i > 0 ? "," : "") + functions[i];
    made.to[0] = `${n.functions}(${list});`;
  }
  const done = applied(code, made);
  return { body: done[0], edits: done[1], lexical, vars, functions, error };
}
