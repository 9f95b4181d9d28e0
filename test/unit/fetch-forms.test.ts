/**
 * `peerload fetch` picks its form from a table (src/cli/fetch.ts): KServe's storage URI, a source's own scheme
 * (hf://, oci://), else the version spec of the operator's agents; each form parses the arguments itself, so a
 * flag's value is never taken for the source.
 */
import { describe, expect, it } from 'vitest';
import { run } from '../../src/cli/fetch.ts';

const lines = () => {
  const out: string[] = [];
  const err: string[] = [];
  return { io: { out: (l: string) => out.push(l), err: (l: string) => err.push(l) }, out, err };
};
const refusal = (argv: string[]) =>
  run(argv, lines().io).then(
    () => 'ran',
    (e: unknown) => (e as Error).message,
  );

describe('peerload fetch: the form is the source', () => {
  it("an oci:// reference after a flag with a URL value is the OCI form, not KServe's", async () => {
    expect(
      await refusal(['--proxy', 'http://127.0.0.1:9', 'oci://registry.example.com/models/m', '/tmp/x']),
    ).toMatch(/OCI reference "oci:\/\/registry\.example\.com\/models\/m": give a tag/);
    expect(await refusal(['oci://registry.example.com/m:v1', '/tmp/x', '--name', 'm'])).toBe(
      'an oci:// reference takes a directory, not --name, --spec or --root',
    );
  });

  it("hf:// is the Hub form, a bucket URI KServe's, flags only the version spec's", async () => {
    expect(await refusal(['hf://gpt2', '/tmp/x'])).toMatch(
      /^hf:\/\/gpt2: the repository must be namespace\/name/,
    );
    expect(await refusal(['s3://bucket/prefix'])).toMatch(
      /give the storage URI and the destination, as KServe does/,
    );
    expect(await refusal(['--root', '/tmp/x'])).toMatch(/^--name is required/);
    expect(await refusal(['--root', '/tmp/x', 'unknown://x'])).toMatch(
      /^unexpected argument "unknown:\/\/x"/,
    );
  });

  it('--help alone is the whole usage: every form named', async () => {
    const l = lines();
    expect(await run(['--help'], l.io)).toBe(0);
    const usage = l.out.join('\n');
    for (const form of [
      '--name MODEL --spec FILE --root DIR',
      'hf://NAMESPACE/NAME',
      'STORAGE_URI DEST',
      'oci://',
    ])
      expect(usage).toContain(form);
  });
});
