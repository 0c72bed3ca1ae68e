// What the worker's helper modules (typescript.ts, modules.ts) use of the language's own
// objects, captured when the worker starts, before any guest code: the guest may replace
// any of these later, and the helpers run after it has.

// deno-lint-ignore-file no-explicit-any
// bind is taken here, with call bound as what it binds: an uncurry of a method reached late
// (main.ts takes a stack frame's methods from the first stack it writes, after guest code)
// must not look Function.prototype.bind up again.
const bindCall = Function.prototype.bind.bind(Function.prototype.call);
/** fn as a function of its `this` and then its arguments, immune to later changes of call,
 * apply and bind. */
export const uncurry = <T extends (...a: any[]) => any>(fn: T) =>
  bindCall(fn) as unknown as (self: any, ...args: Parameters<T>) => ReturnType<T>;
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
  Object.getOwnPropertyDescriptor(Object.getPrototypeOf(Uint8Array.prototype), "length")!.get!,
) as (array: ArrayLike<number>) => number;

/** A global of Deno's that it loads on first use (its getter loads the module that holds it,
 * a millisecond or more of every start were it read then): the getter, taken now, gives the
 * global's own value whenever it is first asked, whatever the guest assigned to the name. A
 * plain value is kept as it is. */
export function lazyGlobal<T>(name: string): () => T {
  const found = Object.getOwnPropertyDescriptor(globalThis, name)!;
  const get = found.get, plain = found.value;
  if (get === undefined) return () => plain;
  const call = uncurry(get);
  let value: T | undefined;
  return () => (value ??= call(globalThis));
}

/** Deno's TypeScript transpiler: node:module's stripTypeScriptTypes. */
export type Strip = (code: string, options: any) => string;
