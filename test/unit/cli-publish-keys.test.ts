import { describe, expect, it } from 'vitest';
import { runPeerload } from '../support/process.ts';

const run = (args: string[], env: Record<string, string> = {}) =>
  runPeerload(['publish-keys', ...args], { env: { PATH: process.env.PATH ?? '', ...env } });

describe('peerload publish-keys (flags)', () => {
  it('needs the Secret, and says so', async () => {
    const r = await run([], { POD_NAMESPACE: 'ml' });
    expect(r.code).toBe(2);
    expect(r.stderr).toMatch(/--secret is required/);
  });

  it('names a bad Secret name, a bad interval and a missing namespace', async () => {
    expect((await run(['--secret', 'Not_A_Name'], { POD_NAMESPACE: 'ml' })).stderr).toMatch(
      /--secret "Not_A_Name" is not a Secret name/,
    );
    expect(
      (await run(['--secret', 'keys', '--poll-interval', 'often'], { POD_NAMESPACE: 'ml' })).stderr,
    ).toMatch(/--poll-interval "often" is not a duration/);
    const r = await run(['--secret', 'keys']);
    expect(r.code).toBe(2);
    expect(r.stderr).toMatch(/--namespace is required outside a pod/);
  });

  it('is listed by peerload --help and explains itself', async () => {
    const help = await run(['--help']);
    expect(help.code).toBe(0);
    expect(help.stdout).toMatch(/<pod>\.json/);
    const usage = await runPeerload(['--help']);
    expect(usage.code).toBe(0);
    expect(usage.stdout).toMatch(/publish-keys/);
  });
});
