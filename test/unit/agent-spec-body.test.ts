/**
 * What the operator sends an agent is bounded on the sender's side (place/spec.ts): a source's credential travels
 * once, in `headerSets`, however many files name it; the PUT body is built file by file and refused past the
 * agent's cap before it is whole (a 1 MiB token copied into 480 layers made a 480 MiB string); the agent's schema
 * keeps its own bounds on sets and headers and still takes the per-file headers older operators sent.
 */
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { Agent } from 'undici';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  MAX_HEADER_VALUE,
  MAX_SPEC_BYTES,
  ModelVersionSpecSchema,
  SpecTooLargeError,
  specBody,
  specProblems,
} from '../../src/place/spec.ts';
import { AgentClient } from '../../src/servers/agent-client.ts';
import type { ModelFiles } from '../../src/servers/driver.ts';

const url = (i: number) =>
  `https://registry.example.com/v2/models/m/blobs/sha256:${String(i).padStart(64, '0')}`;

/** `n` files of an artifact, each naming the `registry` set, as oci-source.ts builds them. */
function layers(n: number, token: string): ModelFiles {
  return {
    headerSets: { registry: { authorization: `Bearer ${token}` } },
    files: Array.from({ length: n }, (_, i) => ({
      path: `weights/part-${i}.bin`,
      url: url(i),
      size: 1024,
      sha256: String(i).padStart(64, '0'),
      layer: `layer ${i} (sha256:${String(i).padStart(12, '0')}, weights/part-${i}.bin)`,
      headerSet: 'registry',
    })),
  };
}

describe('the PUT body of a version spec', () => {
  it('is the spec as JSON, with the credential once however many files name it', () => {
    const token = 'k'.repeat(8000);
    const spec = { ...layers(480, token), version: '1', directory: 'm', tag: 't' };
    const body = specBody(spec);
    expect(JSON.parse(body)).toEqual(spec);
    expect(body.split(token)).toHaveLength(2);
    // 480 layers under the 4 MiB manifest cap: a bounded body, not 480 copies of the token (3.8 MB here).
    expect(Buffer.byteLength(body)).toBeLessThan(200 * 1024);
    expect(ModelVersionSpecSchema.safeParse(JSON.parse(body)).success).toBe(true);
    // Only files: the same JSON as JSON.stringify.
    const bare = { files: [{ path: 'a', url: url(1) }] };
    expect(specBody(bare)).toBe(JSON.stringify(bare));
  });

  it('is refused once it would pass the cap, before the rest is built (per-file copies of a big token)', () => {
    const big = 'x'.repeat(1024 * 1024);
    // What an operator before header sets built: 480 files each with a 1 MiB Authorization (480 MiB).
    const perFile = {
      version: '1',
      files: Array.from({ length: 480 }, (_, i) => ({
        path: `p${i}`,
        url: url(i),
        headers: { authorization: big },
      })),
    };
    let error: unknown;
    try {
      specBody(perFile);
    } catch (e) {
      error = e;
    }
    expect(error).toBeInstanceOf(SpecTooLargeError);
    expect((error as SpecTooLargeError).reason).toBe('SpecTooLarge');
    expect((error as Error).message).toBe(
      `the version spec is larger than the ${MAX_SPEC_BYTES} bytes an agent reads (at file 15 of 480): fewer files per version, or shorter paths, URLs and headers`,
    );
    // The cap holds for the head too (a huge header set), and for a smaller cap.
    expect(() => specBody({ headers: { a: big }, files: [] }, 1024)).toThrow(/at file 0 of 0/);
    expect(() => specBody({ version: '1', ...layers(100, 't') }, 4096)).toThrow(/at file \d+ of 100/);
  });
});

describe("the agent's schema of header sets", () => {
  const base = { version: '1', files: [{ path: 'a', url: url(1), headerSet: 'registry' }] };
  const problems = (spec: unknown) => {
    const r = ModelVersionSpecSchema.safeParse(spec);
    return r.success ? '' : specProblems(r.error);
  };

  it('takes a set the files name, and per-file headers as older operators sent them', () => {
    expect(problems({ ...base, headerSets: { registry: { authorization: 'Bearer t' } } })).toBe('');
    expect(
      problems({ version: '1', files: [{ path: 'a', url: url(1), headers: { authorization: 'Bearer t' } }] }),
    ).toBe('');
  });

  it('refuses a set no one holds, the daemon headers, too many sets, too long a value', () => {
    expect(problems(base)).toBe('files[0].headerSet: names "registry", which headerSets does not hold');
    expect(problems({ ...base, headerSets: { registry: { 'X-Dragonfly-Tag': 'x' } } })).toBe(
      'headerSets.registry.X-Dragonfly-Tag: is set by the agent itself',
    );
    const sets = Object.fromEntries(Array.from({ length: 17 }, (_, i) => [`s${i}`, { a: 'b' }]));
    expect(problems({ ...base, headerSets: { ...sets, registry: {} } })).toBe(
      'headerSets: must hold at most 16 sets',
    );
    expect(
      problems({ ...base, headerSets: { registry: { authorization: 'x'.repeat(MAX_HEADER_VALUE + 1) } } }),
    ).toMatch(/^headerSets\.registry\.authorization: Too big/);
    expect(problems({ ...base, headerSets: { 'bad name!': {} } })).toMatch(
      /^headerSets\.bad name!: Invalid key/,
    );
  });
});

describe('AgentClient.place', () => {
  let server: Server;
  let dispatcher: Agent;
  const seen: { method: string; bytes: number }[] = [];
  beforeAll(async () => {
    dispatcher = new Agent();
    server = createServer((req, res) => {
      let bytes = 0;
      req.on('data', (c: Buffer) => (bytes += c.length));
      req.on('end', () => {
        seen.push({ method: req.method!, bytes });
        res.writeHead(202, { 'content-type': 'application/json' }).end('{}');
      });
    });
    await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  });
  afterAll(async () => {
    server.closeAllConnections();
    await new Promise((r) => server.close(r));
    await dispatcher.close();
  });

  it('refuses a spec over the cap before sending anything: terminal, reason SpecTooLarge', async () => {
    const client = new AgentClient({
      baseURL: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
      dispatcher,
      token: async () => 'agent-token',
    });
    const big = 'x'.repeat(1024 * 1024);
    const files: ModelFiles = {
      files: Array.from({ length: 480 }, (_, i) => ({
        path: `p${i}`,
        url: url(i),
        headers: { authorization: big },
      })),
    };
    await expect(client.place('m', '1', files, {})).rejects.toMatchObject({
      kind: 'terminal',
      reason: 'SpecTooLarge',
      message: expect.stringContaining('larger than the 16777216 bytes an agent reads'),
    });
    expect(seen).toEqual([]);
  });
});
