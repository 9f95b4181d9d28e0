/**
 * Set-up file of every vitest project: `toEqual`/`toStrictEqual` compare two byte arrays of the same class
 * (Buffer, Uint8Array) with `Buffer.equals`. Vitest's own deep equality walks a typed array element by element
 * (its iterable equality, one `equals` call per byte): about 5 s per MiB on a loaded CI machine, so comparing a
 * downloaded 5 MiB file with what was uploaded took longer than the download. Arrays of different classes are left
 * to vitest, so `toStrictEqual` still tells a Buffer from a Uint8Array.
 */
import { expect } from 'vitest';

function bytesEqual(a: unknown, b: unknown): boolean | undefined {
  if (!(a instanceof Uint8Array) || !(b instanceof Uint8Array) || a.constructor !== b.constructor)
    return undefined;
  const view = (x: Uint8Array) => Buffer.from(x.buffer, x.byteOffset, x.byteLength);
  return view(a).equals(view(b));
}

expect.addEqualityTesters([bytesEqual]);
