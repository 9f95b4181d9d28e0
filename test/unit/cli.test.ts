import { describe, expect, it } from 'vitest';
import { runPeerload } from '../support/process.ts';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { TASKID_VECTORS, type TaskIdVector } from '../fixtures/taskid-vectors.ts';
import { credentialTag } from '../../src/storage/credential-tag.ts';
import { defaultFilter } from '../../src/storage/objecturl.ts';
import { DEFAULT_FILTERED_QUERY_PARAMS, taskID } from '../../src/storage/taskid.ts';

const run = (...args: string[]) => runPeerload(args);

describe('peerload taskid', () => {
  type V = TaskIdVector;
  const all = TASKID_VECTORS.vectors.filter((v) => !v.revision && !/[ \u0080-\uffff]/.test(v.url));
  // Cases where the two rules give different ids, with tags, applications and piece lengths among them.
  const cases = all.filter((v) => v.expected['1.4'].taskID !== v.expected['1.5.3+'].taskID).slice(-6);
  const argsOf = (v: V) => {
    const args = [v.url];
    args.push('--filter', v.filter.join(','));
    if (v.tag !== null) args.push('--tag', v.tag);
    if (v.application !== null) args.push('--application', v.application);
    if (v.pieceLength !== null) args.push('--piece-length', String(v.pieceLength));
    return args;
  };
  it('has vectors to check', () => expect(cases.length).toBeGreaterThan(3));
  for (const v of cases) {
    it(`prints both rules' ids for ${v.url} (default: 1.4, the tested release)`, async () => {
      const args = argsOf(v);
      expect((await run('taskid', ...args)).stdout).toBe(`${v.expected['1.4'].taskID}\n`);
      expect((await run('taskid', ...args, '--daemon-version', '1.4.2')).stdout).toBe(
        `${v.expected['1.4'].taskID}\n`,
      );
      expect((await run('taskid', ...args, '--daemon-version', '1.5.3+')).stdout).toBe(
        `${v.expected['1.5.3+'].taskID}\n`,
      );
      expect((await run('taskid', ...args, '--daemon-version', 'v1.6.0')).stdout).toBe(
        `${v.expected['1.5.3+'].taskID}\n`,
      );
    });
  }
  it('--canonical prints the canonical URL', async () => {
    const url = 'https://example.com/file.txt?z=9&b=2&a=1';
    const r = await run('taskid', url, '--filter', 'z', '--canonical');
    expect(r.stdout).toBe('https://example.com/file.txt?b=2&a=1\n');
    const sorted = await run('taskid', url, '--filter', 'z', '--canonical', '--daemon-version', '1.5.3');
    expect(sorted.stdout).toBe('https://example.com/file.txt?a=1&b=2\n');
  });
  it("without --filter uses the daemon's default filter, as a download without filter headers does", async () => {
    const bare = 'http://127.0.0.1:9000/weights/model.mar';
    const signed = `${bare}?X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Credential=AKIA%2F20260101&X-Amz-Date=20260101T000000Z&X-Amz-Expires=600&X-Amz-SignedHeaders=host&X-Amz-Signature=abc123`;
    const expected = taskID({ url: signed, filter: DEFAULT_FILTERED_QUERY_PARAMS, rule: '1.4' });
    expect(expected).toBe(taskID({ url: bare, filter: [], rule: '1.4' }));
    expect((await run('taskid', signed)).stdout).toBe(`${expected}\n`);
    // An explicit empty filter keeps the signature in the id.
    const unfiltered = (await run('taskid', signed, '--filter', '')).stdout.trim();
    expect(unfiltered).toBe(taskID({ url: signed, filter: [], rule: '1.4' }));
    expect(unfiltered).not.toBe(expected);
  });
  it('prints one line per URL, signed URLs redacted', async () => {
    const a = 'https://example.com/a.bin?Signature=s3cr3tvalue&Expires=1';
    const r = await run('taskid', a, 'https://example.com/b.bin');
    const id = (url: string) => taskID({ url, filter: DEFAULT_FILTERED_QUERY_PARAMS, rule: '1.4' });
    expect(r.stdout).toBe(
      `${id(a)}  https://example.com/a.bin?Signature=***&Expires=***\n${id('https://example.com/b.bin')}  https://example.com/b.bin\n`,
    );
    expect(r.stdout).not.toContain('s3cr3tvalue');
  });
  it('prints the id of every file of a model directory', async () => {
    const r = await run(
      'taskid',
      ...[
        '--object-storage',
        's3',
        '--bucket',
        'weights',
        '--endpoint',
        'http://127.0.0.1:9000',
        '--path-style',
      ],
      ...['--prefix', 'models/llama', '--file', 'config.json', '--file', 'shards/model-1.safetensors'],
    );
    expect(r.code).toBe(0);
    const filter = defaultFilter('s3');
    expect(r.stdout).toBe(
      [
        `${taskID({ url: 'http://127.0.0.1:9000/weights/models/llama/config.json', filter, rule: '1.4' })}  config.json`,
        `${taskID({ url: 'http://127.0.0.1:9000/weights/models/llama/shards/model-1.safetensors', filter, rule: '1.4' })}  shards/model-1.safetensors`,
        '',
      ].join('\n'),
    );
  });
  it("gives a private directory's ids with the tag of --credentials, as status.tasks shows them, never the secret", async () => {
    const dir = await mkdtemp(join(tmpdir(), 'taskid-creds-'));
    try {
      const creds = join(dir, 'creds.yaml');
      await writeFile(creds, 'access_key: AKIAEXAMPLE\nsecret_key: s3cr3t-secret-key-value\n');
      const location = {
        type: 's3',
        bucket: 'weights',
        endpoint: 'http://127.0.0.1:9000',
        pathStyle: true,
      } as const;
      const r = await run(
        'taskid',
        ...['--object-storage', 's3', '--bucket', 'weights', '--endpoint', location.endpoint, '--path-style'],
        ...['--prefix', 'models/llama', '--file', 'config.json', '--credentials', creds, '--tag', 'v1'],
      );
      expect(r.code).toBe(0);
      const tag = credentialTag(location, {
        type: 's3',
        accessKeyID: 'AKIAEXAMPLE',
        secretAccessKey: 's3cr3t-secret-key-value',
      });
      const url = 'http://127.0.0.1:9000/weights/models/llama/config.json';
      expect(r.stdout).toBe(
        `${taskID({ url, filter: defaultFilter('s3'), tag: `v1/${tag}`, rule: '1.4' })}  config.json\n`,
      );
      expect(r.stdout + r.stderr).not.toContain('s3cr3t');
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  });
  it('explains a directory it cannot use', async () => {
    const s3 = ['--object-storage', 's3', '--bucket', 'weights', '--prefix', 'm/'];
    expect((await run('taskid', ...s3)).stderr).toContain(
      'give --file (the paths under --prefix) or --credentials (to list --prefix), or both',
    );
    const bad = await run('taskid', ...s3, '--file', '../etc/passwd');
    expect(bad.code).toBe(2);
    expect(bad.stderr).toContain('files[0] "../etc/passwd" is not a relative file path');
    const creds = await run('taskid', ...s3, '--credentials', '/nonexistent/creds.yaml');
    expect(creds.stderr).toContain('--credentials: cannot read /nonexistent/creds.yaml: ENOENT');
  });
  it('explains a bad daemon version', async () => {
    const r = await run('taskid', 'https://example.com/x', '--daemon-version', 'latest');
    expect(r.code).toBe(2);
    expect(r.stderr).toContain('--daemon-version must be "1.4", "1.5.3+" or the peer daemon');
    expect(r.stderr).toContain('got "latest"');
  });
  it('explains a bad piece length', async () => {
    const r = await run('taskid', 'https://example.com/x', '--piece-length', 'four');
    expect(r.code).toBe(2);
    expect(r.stderr).toContain('--piece-length must be a positive integer');
  });
});

describe('peerload', () => {
  it('names the flag of a bad operator option instead of crashing', async () => {
    const r = await run('operator', '--resync-period', 'often');
    expect(r.code).toBe(2);
    expect(r.stderr).toMatch(/--resync-period.*duration/);
    expect(r.stderr).not.toMatch(/at .*\.ts:\d+/); // no stack trace
  });
  it('rejects an unknown command with the usage', async () => {
    const r = await run('preheat-everything');
    expect(r.code).toBe(2);
    expect(r.stderr).toContain('Commands:');
  });
  it('prints the CRDs', async () => {
    const r = await run('crds');
    expect(r.stdout).toContain('name: modelpreheats.peerload.io');
    expect(r.stdout).toContain('name: servedmodels.peerload.io');
  });
});
