// The worker as deno starts it: one JavaScript file made from these modules when they are
// staged (pydeno/host/process/staging.py), never run itself by a worker.
//
// Loading the TypeScript modules as they are costs every start more than their code does:
// deno looks each one up in its transpile cache and hands V8 the cached JavaScript with an
// inline source map, several times the code's own size, to scan; and each module is a
// module record of its own. So their types are stripped here by deno's own transpiler (in
// "strip" mode: every token stays where it was written), and the modules are joined into
// one, each inside a function of its own, evaluated in the order deno would evaluate them.
// An import becomes a destructuring of what the imported module's function returned; an
// export keeps its declaration, and its name is returned. The modules hold their names as
// constants, functions and classes that never change after their module ran, so what
// importers see is what they would have seen through a live binding.
//
// Only the import and export forms the worker uses are understood; anything else is refused,
// so that a worker module written otherwise fails its staging instead of running changed.
//
// Usage: deno run --allow-read=<folder> join.ts <folder>/main.ts   (the JavaScript on stdout)

import { stripTypeScriptTypes } from "node:module";
import { lex, PUNCT, same, STRING, WORD } from "./lexer.ts";

type Module = { name: string; body: string; imports: string[]; exports: string[] };

const LOCAL = /^\.\/([a-z]+)\.ts$/;
// Words that begin a statement: met on a line of their own, the constant ended before them.
const STATEMENT = /^(?:export|import|function|const|let|var|class|if|for|while|return)$/;

function fail(name: string, what: string): never {
  throw new Error(`join.ts: ${name}.ts: ${what}`);
}

/** One module's JavaScript, its imports turned into destructurings of the modules' names
 * ("$m_<name>") and its export keywords removed; what it imports and exports. */
export function convert(name: string, source: string): Module {
  const js = stripTypeScriptTypes(source, { mode: "strip" }) as string;
  const t = lex(js);
  const word = (k: number, s: string) => k < t.count && t.kind[k] === WORD && same(js, t.start[k], t.end[k], s);
  const punct = (k: number, s: string) => k < t.count && t.kind[k] === PUNCT && same(js, t.start[k], t.end[k], s);
  const text = (k: number) => js.slice(t.start[k], t.end[k]);
  const imports: string[] = [];
  const exports: string[] = [];
  // The text is rebuilt token by token: what lies between two tokens (spaces, comments, the
  // types stripped) is left out, but for a line break (where a statement may end) or a space.
  let out = "";
  const gap = (k: number) => (k === 0 || t.start[k] === t.end[k - 1] ? "" : t.broken[k] === 1 ? "\n" : " ");
  // Whether token k begins a statement at the top level: import and export appear nowhere else.
  const atTop = (k: number) =>
    t.depth[k] === 0 && t.nest[k] === 0 && (k === 0 || punct(k - 1, ";") || punct(k - 1, "}") || t.broken[k] === 1);
  for (let k = 0; k < t.count; k++) {
    if (word(k, "import") && atTop(k) && !punct(k + 1, "(") && !punct(k + 1, ".")) {
      if (t.kind[k + 1] === STRING) { // import "./x.ts": the module runs first, and gives no name
        const found = LOCAL.exec(JSON.parse(text(k + 1)));
        if (found === null) fail(name, `an import of ${text(k + 1)}: only ./<module>.ts is understood`);
        imports.push(found[1]);
        out += gap(k);
        k += punct(k + 2, ";") ? 2 : 1;
        continue;
      }
      if (!punct(k + 1, "{")) fail(name, `only "import { ... } from" is understood, at ${text(k + 1)}`);
      const names: string[] = [];
      let j = k + 2;
      for (; j < t.count && !punct(j, "}"); j++) {
        if (punct(j, ",")) continue;
        if (t.kind[j] !== WORD) fail(name, `an import names ${text(j)}`);
        if (word(j + 1, "as")) {
          names.push(`${text(j)}: ${text(j + 2)}`);
          j += 2;
        } else names.push(text(j));
      }
      if (!word(j + 1, "from") || t.kind[j + 2] !== STRING) fail(name, "an import without from");
      const found = LOCAL.exec(JSON.parse(text(j + 2)));
      if (found === null) fail(name, `an import of ${text(j + 2)}: only ./<module>.ts is understood`);
      let end = j + 2;
      if (punct(end + 1, ";")) end++;
      imports.push(found[1]);
      out += `${gap(k)}const { ${names.join(", ")} } = $m_${found[1]};`;
      k = end;
    } else if (word(k, "export") && atTop(k)) {
      let j = k + 1;
      if (word(j, "async")) j++;
      if (!(word(j, "function") || word(j, "const") || word(j, "class"))) {
        fail(name, `only exported functions, classes and constants are understood, at ${text(j)}`);
      }
      out += gap(k);
      if (word(j, "const")) {
        // Each declarator's name: the first word, then the one after each comma at the top
        // level, up to the semicolon the statement must end with.
        let expectName = true;
        let d = j + 1;
        for (; d < t.count && !(punct(d, ";") && t.depth[d] === 0 && t.nest[d] === 0); d++) {
          if (t.depth[d] !== 0 || t.nest[d] !== 0) continue;
          if (expectName) {
            if (t.kind[d] !== WORD) fail(name, `an exported constant is a pattern, at ${text(d)}`);
            exports.push(text(d));
            expectName = false;
          } else if (punct(d, ",")) expectName = true;
          else if (t.broken[d] === 1 && STATEMENT.test(text(d))) break;
        }
        if (!punct(d, ";")) fail(name, `the export of ${exports[exports.length - 1]} does not end with ";"`);
      } else {
        let n = j + 1;
        if (punct(n, "*")) n++;
        exports.push(text(n));
      }
    } else out += gap(k) + text(k);
  }
  return { name, body: out, imports, exports };
}

/** The joined worker: the modules main.ts reaches, in the order deno evaluates them (each
 * after what it imports, in import order). */
export function join(read: (name: string) => string, entry = "main"): string {
  const modules = new Map<string, Module>();
  const order: string[] = [];
  const visiting = new Set<string>();
  const visit = (name: string) => {
    if (modules.has(name)) return;
    if (visiting.has(name)) fail(name, "an import cycle");
    visiting.add(name);
    const m = convert(name, read(name));
    for (const dependency of m.imports) visit(dependency);
    visiting.delete(name);
    modules.set(name, m);
    order.push(name);
  };
  visit(entry);
  let text = "";
  for (const name of order) {
    const m = modules.get(name)!;
    if (name === entry) text += `// ${name}.ts\n${m.body}\n`;
    else text += `// ${name}.ts\nconst $m_${name} = (() => {\n${m.body}\nreturn { ${m.exports.join(", ")} };\n})();\n`;
  }
  return text;
}

if (import.meta.main) {
  const entry: string = Deno.args[0];
  const folder = entry.slice(0, entry.lastIndexOf("/") + 1);
  const main = entry.slice(folder.length).replace(/\.ts$/, "");
  const text = join((name) => Deno.readTextFileSync(`${folder}${name}.ts`), main);
  Deno.stdout.writeSync(new TextEncoder().encode(text));
}
