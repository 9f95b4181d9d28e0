import { randomBytes } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import suite from '../../vitest.config.ts';
import kserveSuite from '../../vitest.kserve.config.ts';
import vllmSuite from '../../vitest.vllm.config.ts';

/** A byte array vitest's element-by-element equality cannot compare: iterating it throws. */
class Unwalkable extends Uint8Array {
  override [Symbol.iterator](): ArrayIterator<number> {
    throw new Error('iterated byte by byte');
  }
}

describe('byte arrays in toEqual (test/support/byte-equality.ts, a set-up file of every project)', () => {
  it('compares them whole, never byte by byte', () => {
    const bytes = randomBytes(1 << 20);
    expect(Unwalkable.from(bytes)).toEqual(Unwalkable.from(bytes));
    expect(Unwalkable.from(bytes)).toStrictEqual(Unwalkable.from(bytes));
    const other = Unwalkable.from(bytes);
    other[other.length - 1]! ^= 1;
    expect(Unwalkable.from(bytes)).not.toEqual(other);
  });

  it('tells unequal lengths, contents and views apart', () => {
    const bytes = randomBytes(4096);
    expect(Buffer.from(bytes)).toEqual(bytes);
    expect(bytes.subarray(1)).not.toEqual(bytes);
    const changed = Buffer.from(bytes);
    changed[2048]! ^= 0xff;
    expect(changed).not.toEqual(bytes);
    // A view is compared by its own bytes, not its whole backing buffer.
    expect(bytes.subarray(10, 20)).toEqual(Buffer.from(bytes.subarray(10, 20)));
    expect({ file: Buffer.from(bytes) }).toEqual({ file: bytes });
  });

  it('leaves arrays of different classes to vitest, which tells a Buffer from a Uint8Array', () => {
    const bytes = randomBytes(16);
    expect(new Uint8Array(bytes)).not.toEqual(Buffer.from(bytes));
    expect(new Uint8Array(bytes)).not.toStrictEqual(Buffer.from(bytes));
    expect(new Uint8Array(bytes)).toStrictEqual(new Uint8Array(bytes));
  });
});

it('every project of every vitest configuration loads the set-up file', () => {
  type Project = { name?: unknown; setupFiles?: string | string[] | undefined };
  const projects: Project[] = [
    ...(suite.test!.projects as { test: Project }[]).map((p) => p.test),
    ...(kserveSuite.test!.projects as { test: Project }[]).map((p) => p.test),
    vllmSuite.test!,
  ];
  expect(projects.map((t) => t.name)).toEqual([
    'unit',
    'integration',
    'e2e',
    'cluster',
    'kserve',
    'kserve-cluster',
    'vllm',
  ]);
  for (const t of projects) expect(t.setupFiles, String(t.name)).toContain('test/support/byte-equality.ts');
});
