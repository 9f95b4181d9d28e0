/**
 * The refetch counts cost one read of their folder per placement (src/place/refetch.ts poisonedDigests), not one
 * open per checksummed file: the file system calls are counted while a version of many checksummed files is placed,
 * one of whose digests was served wrongly before (that one is still asked for under its fresh task).
 */
import { mkdtemp, rm } from 'node:fs/promises';
import * as fsp from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { downloadVersion, newProgress, preflight } from '../../src/place/placer.ts';
import { REFETCH_DIR, markPoisoned } from '../../src/place/refetch.ts';
import { ModelVersionSpecSchema } from '../../src/place/spec.ts';
import { TAG_HEADER } from '../../src/storage/taskid.ts';
import { sha256, startFakeRegistry } from '../support/oci-artifacts.ts';
import { downloaderConfig, peerBed } from '../support/peer-bed.ts';

vi.mock('node:fs/promises', async (original) => {
  const actual = await original<typeof import('node:fs/promises')>();
  return { ...actual, readFile: vi.fn(actual.readFile), readdir: vi.fn(actual.readdir) };
});

describe('refetch counts during a placement', () => {
  let root: string;
  const bed = peerBed('registry', startFakeRegistry);
  beforeAll(async () => {
    root = await mkdtemp(join(tmpdir(), 'place-refetch-'));
  });
  afterAll(async () => {
    await rm(root, { recursive: true, force: true });
  });

  it('read the folder once and only the count of a digest listed there', async () => {
    const blobs = Array.from({ length: 12 }, (_, i) => Buffer.from(`file ${i} `.repeat(100)));
    const files = blobs.map((b, i) => {
      const digest = bed.registry.putBlob('models/many', b);
      return {
        path: `f${i}.bin`,
        url: `${bed.registry.url}/v2/models/many/blobs/${digest}`,
        size: b.length,
        sha256: sha256(b).slice(7),
      };
    });
    const poisoned = files[3]!.sha256;
    expect(await markPoisoned(root, poisoned)).toBe(1);
    const spec = ModelVersionSpecSchema.parse({ version: '1', files });
    const config = downloaderConfig(bed, root);
    const refetchDir = join(root, REFETCH_DIR);
    const readFile = vi.mocked(fsp.readFile);
    const readdir = vi.mocked(fsp.readdir);
    readFile.mockClear();
    readdir.mockClear();
    await preflight('m', spec, config);
    const p = await downloadVersion('m', spec, config, newProgress('m', spec));
    expect(p.state).toBe('Ready');
    const under = (calls: unknown[][]) =>
      calls.filter((c) => String(c[0]).startsWith(refetchDir)).map((c) => String(c[0]));
    // The old per-file reads: 12 opens of <root>/.peerload-refetch/<sha256>. Now one readdir and one count.
    expect(under(readdir.mock.calls)).toEqual([refetchDir]);
    expect(under(readFile.mock.calls)).toEqual([join(refetchDir, poisoned)]);
    const tags = bed.peer.requests.map((q) => [q.url, q.headers[TAG_HEADER.toLowerCase()]]);
    expect(tags.filter(([, tag]) => tag !== undefined)).toEqual([[files[3]!.url, 'peerload-refetch-1']]);
  });
});
