import { describe, expect, it } from 'vitest';
import { ServedModelSpec } from '../../src/api/index.ts';
import { isCommit } from '../../src/api/source-huggingface.ts';

const triton = {
  service: { name: 'triton' },
  driver: 'triton',
  agent: { port: 8090, tokenSecretRef: { name: 'agent', key: 'token' } },
};
const spec = (huggingface: Record<string, unknown>, extra: Record<string, unknown> = {}) =>
  ServedModelSpec.safeParse({ modelName: 'tiny', modelServer: triton, source: { huggingface }, ...extra });
const messages = (r: ReturnType<typeof spec>) =>
  r.error?.issues.map((i) => `${i.path.join('.')}: ${i.message}`);

describe('spec.source.huggingface', () => {
  it('takes a repository alone, with revision main by default', () => {
    const r = spec({ repo: 'org/tiny-model.v2' });
    expect(r.success).toBe(true);
    expect(r.data!.source!.huggingface).toEqual({ repo: 'org/tiny-model.v2', revision: 'main' });
  });

  it('takes every field', () => {
    const r = spec({
      repo: 'meta-llama/Llama-3.1-8B-Instruct',
      revision: 'refs/pr/1',
      include: ['*.safetensors', '*.json'],
      exclude: ['original/**'],
      maxFiles: 50,
      maxBytes: 20 * 1024 ** 3,
      tokenSecretRef: { name: 'hf', key: 'token' },
      endpoint: 'https://hub.example.com:8443',
    });
    expect(messages(r)).toBeUndefined();
  });

  it('with preheat.create needs no objectStorage: the source says where the bytes are', () => {
    expect(spec({ repo: 'org/m' }, { preheat: { create: true } }).success).toBe(true);
    const archive = ServedModelSpec.safeParse({
      modelName: 'm',
      fileName: 'm.mar',
      modelServer: { service: { name: 'ts' } },
      preheat: { create: true },
    });
    expect(archive.error?.issues.map((i) => i.message)).toContain(
      'preheat.create: true needs preheat.objectStorage (the bucket of fileName or files); a source says itself where the bytes are',
    );
  });

  it.each([
    ['gpt2', 'source.huggingface.repo: must be namespace/name'],
    ['org/-a', 'source.huggingface.repo: must be namespace/name'],
    ['org/a..b', 'source.huggingface.repo: must be namespace/name'],
    ['a/b/c', 'source.huggingface.repo: must be namespace/name'],
  ])('refuses the repository %s', (repo, message) => {
    expect(messages(spec({ repo }))?.join('\n')).toContain(message);
  });

  it.each(['my branch', 'a..b', 'x~1', 'ref:x', 'tab\there', ''])('refuses the revision %j', (revision) => {
    expect(messages(spec({ repo: 'org/m', revision }))?.join('\n')).toMatch(
      /^source\.huggingface\.revision: /m,
    );
  });

  it.each(['https://hub.example.com/api', 'https://u:p@hub.example.com', 'ftp://hub', 'https://hub?x=1'])(
    'refuses the endpoint %s',
    (endpoint) => {
      expect(messages(spec({ repo: 'org/m', endpoint }))?.join('\n')).toContain(
        'source.huggingface.endpoint: must be http(s)://host[:port] with nothing else',
      );
    },
  );

  it('refuses a source together with fileName or files, and an empty source', () => {
    const one =
      'fileName: set exactly one of fileName (an archive), files (a directory in a bucket) and source (oci or huggingface)';
    expect(messages(spec({ repo: 'org/m' }, { fileName: 'm.mar' }))).toContain(one);
    expect(
      messages(ServedModelSpec.safeParse({ modelName: 'm', modelServer: triton, source: {} })),
    ).toContain('source: set exactly one source: oci or huggingface');
  });

  it('knows a full commit sha', () => {
    expect(isCommit('0123456789abcdef0123456789abcdef01234567')).toBe(true);
    expect(isCommit('main')).toBe(false);
  });
});
