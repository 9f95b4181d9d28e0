import { randomBytes } from 'node:crypto';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { LinkedBody, SAMPLE_SIZE, SAMPLES } from '../../src/place/linked-body.ts';

let dir: string;
beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), 'peerload-linked-body-'));
});
afterAll(() => rm(dir, { recursive: true, force: true }));

/** Feeds `body` to a LinkedBody in chunks of random sizes (samples straddle chunk edges). */
function received(body: Buffer): LinkedBody {
  const linked = new LinkedBody(body.length);
  for (let at = 0; at < body.length;) {
    const n = Math.min(body.length - at, 1 + Math.floor(Math.random() * 10_000));
    linked.keep(body.subarray(at, at + n), at);
    at += n;
  }
  return linked;
}

async function file(content: Buffer): Promise<string> {
  const path = join(dir, randomBytes(6).toString('hex'));
  await writeFile(path, content);
  return path;
}

describe('LinkedBody', () => {
  it('matches the file that holds the body, whatever the chunking, for bodies of any length', async () => {
    for (const length of [1, 100, SAMPLE_SIZE, SAMPLE_SIZE + 1, SAMPLES * SAMPLE_SIZE, 1_000_003]) {
      const body = randomBytes(length);
      expect(await received(body).mismatch(await file(body)), `${length} B`).toBeUndefined();
    }
  });

  it('names the first sampled block that differs, the last block included', async () => {
    const body = randomBytes(1_000_003);
    const last = Buffer.from(body);
    last.writeUInt8(last.readUInt8(body.length - 1) ^ 1, body.length - 1);
    expect(await received(body).mismatch(await file(last))).toBe(
      `the daemon's file differs from the body at byte ${body.length - SAMPLE_SIZE}`,
    );
    const first = Buffer.from(body);
    first.writeUInt8(first.readUInt8(0) ^ 1, 0);
    expect(await received(body).mismatch(await file(first))).toBe(
      "the daemon's file differs from the body at byte 0",
    );
    // A placeholder of zeros (a daemon that linked a file it does not fill) differs at once.
    expect(await received(body).mismatch(await file(Buffer.alloc(body.length)))).toBe(
      "the daemon's file differs from the body at byte 0",
    );
  });

  it('says so when the file is shorter than the body, or cannot be read', async () => {
    const body = randomBytes(100_000);
    expect(await received(body).mismatch(await file(body.subarray(0, 50_000)))).toMatch(
      /^the daemon's file ends before byte \d+$/,
    );
    expect(await received(body).mismatch(join(dir, 'missing'))).toBe(
      "cannot read the daemon's file to check it: ENOENT",
    );
  });
});
