// npm packages the host bundled (pydeno.Packages, pydeno/_base/packages.py). Each arrives as one
// CommonJS script holding the package and all it imports, with the list of node: built-ins
// it requires. It runs once, in the guest's realm, at the first import of its specifier; the
// import is then rewritten (see modules.ts) to a small module that re-exports what the
// script exported.
//
// Why a script and not the bundle as a module: Deno loads a module from a data: or blob: URL
// through its own source analysis, several times slower than V8 compiling the same text as a
// script, and a fresh runtime pays that at its first import of each package.

// deno-lint-ignore-file no-explicit-any
import {
  ObjectCreate,
  StringFn,
  StringSlice,
  StringStartsWith,
} from "./intrinsics.ts";

const JSONStringify = JSON.stringify;
const ObjectKeys = Object.keys;
const ReflectApply = Reflect.apply;
const TypeErrorCtor = TypeError;
// Captured before any guest code: called by this name, an indirect eval, in the global scope.
const IndirectEval: (code: string) => any = globalThis.eval;

type Package = { source: string; url: string; index: number };
const packages: { [specifier: string]: Package } = ObjectCreate(null);
const builtins: { [name: string]: any } = ObjectCreate(null);
let added = 0;

// The module through which the worker hands each package's exports to the module that
// re-exports them: Deno keys modules by URL, so every importer of this URL, the worker
// included, gets the one instance and its one box. A guest that imports it too finds only
// the exports it could import itself.
export const BOX_URL = "data:text/javascript,export%20const%20box%20%3D%20%7B__proto__%3A%20null%7D%3B";
let box: any = null;

/** Register a package; what must load (asynchronously) before it can run: the box module's
 * URL when it is not loaded yet, and each node: built-in it requires that is not. */
export function addPackage(specifier: string, requires: any, source: string): string[] {
  if (typeof specifier !== "string" || typeof source !== "string" || !isStringArray(requires)) {
    throw new TypeErrorCtor("malformed package");
  }
  packages[specifier] = { source, url: "", index: added++ };
  const missing: string[] = [];
  if (box === null) missing[missing.length] = BOX_URL;
  for (let i = 0; i < requires.length; i++) {
    if (builtins[requires[i]] === undefined) missing[missing.length] = "node:" + requires[i];
  }
  return missing;
}

function isStringArray(value: any): value is string[] {
  if (!ArrayIsArray(value)) return false;
  for (let i = 0; i < value.length; i++) if (typeof value[i] !== "string") return false;
  return true;
}
const ArrayIsArray = Array.isArray;

/** What addPackage asked to load, loaded: the box module or a node: built-in. */
export function loaded(url: string, namespace: any): void {
  if (url === BOX_URL) box = namespace.box;
  else builtins[StringSlice(url, 5)] = namespace;
}

export function hasPackages(): boolean {
  return added > 0;
}

export function isPackage(specifier: string): boolean {
  return packages[specifier] !== undefined;
}

/** A node: built-in, as CommonJS code that requires it expects: what it exports by default. */
function requireFn(name: any): any {
  if (typeof name === "string" && StringStartsWith(name, "node:")) {
    const namespace = builtins[StringSlice(name, 5)];
    if (namespace !== undefined) return namespace.default !== undefined ? namespace.default : namespace;
  }
  throw new TypeErrorCtor(`${JSONStringify(StringFn(name))} cannot be required in this sandbox`);
}

/** The URL of the module that re-exports the package's exports; the package's script runs
 * the first time (a throw there is the importer's error, and the next import runs it
 * again). */
export function packageUrl(specifier: string, toUrl: (text: string) => string): string {
  const found = packages[specifier];
  if (found.url !== "") return found.url;
  const fn = IndirectEval(
    `(function (module, exports, require) {"use strict";${found.source}\n})\n//# sourceURL=npm:${specifier}`,
  );
  const module: any = { __proto__: null, exports: {} };
  ReflectApply(fn, undefined, [module, module.exports, requireFn]);
  const exports = module.exports;
  const values: any = { __proto__: null };
  let text = `import { box } from ${JSONStringify(BOX_URL)};\nconst v = box[${found.index}];\n`;
  let list = "";
  // What the script exported, as it is now: a bundled ES module's exports are getters, read
  // once here (a package that reassigns an export later keeps its first value for importers).
  const names = (exports !== null && (typeof exports === "object" || typeof exports === "function")) ? ObjectKeys(exports) : [];
  let n = 0;
  for (let i = 0; i < names.length; i++) {
    const name = names[i];
    if (name === "__esModule") continue;
    const value = exports[name];
    // A package without a default export: the bundle's entry defines it as undefined.
    if (name === "default" && value === undefined) continue;
    values[n] = value;
    text += `const e${n} = v[${n}];\n`;
    list += `${n === 0 ? "" : ", "}e${n} as ${JSONStringify(name)}`;
    n++;
  }
  text += `export { ${list} };\n`;
  box[found.index] = values;
  found.url = toUrl(text);
  return found.url;
}
