// What the worker's helper modules (typescript.ts, modules.ts) use of the language's own
// objects, captured when the worker starts, before any guest code: the guest may replace
// any of these later, and the helpers run after it has.

// deno-lint-ignore-file no-explicit-any
const FunctionCall = Function.prototype.call;
export const uncurry = (fn: any) => FunctionCall.bind(fn) as (self: any, ...args: any[]) => any;
export const StringSlice = uncurry(String.prototype.slice);
export const StringIndexOf = uncurry(String.prototype.indexOf);
export const StringCharCodeAt = uncurry(String.prototype.charCodeAt);
export const StringStartsWith = uncurry(String.prototype.startsWith);
export const RegExpExec = uncurry(RegExp.prototype.exec);
export const ObjectDefineProperty = Object.defineProperty;
export const ObjectCreate = Object.create;
/** Appends value to list by defining it: an assignment would run an index setter the guest
 * put on Object.prototype. */
export function put(list: any[], value: any): void {
  ObjectDefineProperty(list, list.length, { __proto__: null, value, writable: true, enumerable: true, configurable: true } as PropertyDescriptor);
}
export const NumberParseInt = Number.parseInt;
export const StringFn = String;
export const SyntaxErrorCtor = SyntaxError;
/** A typed array's length, from its internal slot: the prototype's getter can be replaced. */
export const TypedArrayLength = uncurry(
  Object.getOwnPropertyDescriptor(Object.getPrototypeOf(Uint8Array.prototype), "length")!.get,
) as (array: ArrayLike<number>) => number;

/** Deno's TypeScript transpiler: node:module's stripTypeScriptTypes. */
export type Strip = (code: string, options: any) => string;
