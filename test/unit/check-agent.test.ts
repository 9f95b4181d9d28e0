/**
 * `peerload check --agent-spec`: every file of a model directory the agent downloads, against the ModelPreheat that
 * warms it (keys of a bucket, or URLs), with the reasons in the agent's terms.
 */
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { run } from '../../src/cli/check.ts';
import { DEFAULT_FILTERS, objectURL, type StorageLocation } from '../../src/storage/objecturl.ts';
import { DEFAULT_FILTERED_QUERY_PARAMS, taskID } from '../../src/storage/taskid.ts';

const tmp = mkdtempSync(join(tmpdir(), 'peerload-check-agent-'));
function file(name: string, content: string): string {
  const path = join(tmp, name);
  writeFileSync(path, content);
  return path;
}

async function check(...argv: string[]) {
  const out: string[] = [];
  const err: string[] = [];
  const code = await run(argv, { out: (l) => out.push(l), err: (l) => err.push(l) });
  return { code, out: out.join('\n'), err: err.join('\n') };
}

const KEYS = ['llama/config.json', 'llama/model-1.safetensors', 'llama/model-2.safetensors'];
const PREHEAT = file(
  'preheat.yaml',
  `apiVersion: peerload.io/v1alpha1
kind: ModelPreheat
metadata:
  name: llama
spec:
  objectStorage:
    type: s3
    bucket: weights
    region: eu-west-1
    keys: [${KEYS.join(', ')}]
    credentialsSecretRef:
      name: store
`,
);
const location: StorageLocation = { type: 's3', bucket: 'weights', region: 'eu-west-1' };
const storage = { type: 's3', bucket: 'weights', region: 'eu-west-1' };
const spec = (over: Record<string, unknown>) =>
  file(
    `spec-${Math.random().toString(36).slice(2)}.json`,
    JSON.stringify({
      version: '1',
      storage,
      files: KEYS.map((key) => ({ path: key.slice(6), key })),
      ...over,
    }),
  );

describe('peerload check --agent-spec', () => {
  it('says OK for every file the preheat warms with the same identity, with the shared task id', async () => {
    const r = await check('--agent-spec', spec({}), PREHEAT);
    expect(r.code).toBe(0);
    expect(r.out.split('\n')).toEqual(
      KEYS.map(
        (key) =>
          `OK   ${key.slice(6)}  task ${taskID({ url: objectURL(location, key), filter: DEFAULT_FILTERS.s3, rule: '1.4' })}`,
      ),
    );
    expect(r.err).toContain('3 of 3 downloads');
  });

  it("names the difference in the agent's terms, and a file no preheat warms", async () => {
    const files = [...KEYS, 'llama/extra.bin'].map((key) => ({ path: key.slice(6), key }));
    const r = await check('--agent-spec', spec({ tag: 'v2', files }), PREHEAT);
    expect(r.code).toBe(1);
    expect(r.out).toContain('MISS config.json');
    expect(r.out).toContain('tag: preheat (none), agent "v2"');
    expect(r.out).not.toContain('plugin');
    expect(r.out).toContain('MISS extra.bin\n     no ModelPreheat among the manifests warms llama/extra.bin');
  });

  it('compares signed URLs given to the agent (no filter sent: the daemon default) with a URL preheat', async () => {
    const url = 'https://weights.s3.eu-west-1.amazonaws.com/llama/config.json';
    const preheat = file(
      'urls.yaml',
      `apiVersion: peerload.io/v1alpha1
kind: ModelPreheat
metadata:
  name: urls
spec:
  urls: [${url}]
`,
    );
    const signedURL = `${url}?X-Amz-Date=20260101T000000Z&X-Amz-Signature=abcdef`;
    const r = await check(
      '--agent-spec',
      file('u.json', JSON.stringify({ version: '1', files: [{ path: 'config.json', url: signedURL }] })),
      preheat,
    );
    expect(r.out).toBe(
      `OK   config.json  task ${taskID({ url, filter: DEFAULT_FILTERED_QUERY_PARAMS, rule: '1.4' })}`,
    );
  });

  it('explains bad input, exit 2', async () => {
    const r = await check('--agent-spec', file('bad.json', '{"version":"1","files":[]}'), PREHEAT);
    expect(r.code).toBe(2);
    expect(r.err).toContain('bad.json: files:');
    const both = await check('--agent-spec', 'x', '--plugin-config', 'y', PREHEAT);
    expect(both.err).toContain('give --plugin-config or --agent-spec, not both');
  });
});
