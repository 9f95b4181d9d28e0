/**
 * Where a Hub may send the agents: every LFS file's redirect (lfsLocations) is checked against the admin's list
 * before any agent or peer daemon is told about it. A hostile Hub (the emulator's `redirectOf`) points its files at
 * a link-local metadata address, a cluster-internal Service, loopback and another tenant's bucket; each is refused
 * with a reason naming the file and the flag, never a signed URL. The public Hub's CDN names are allowed by default,
 * and a redirect to the Hub's own origin needs no listing.
 */
import { Agent } from 'undici';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { HubClient } from '../../src/huggingface/client.ts';
import { DEFAULT_HUB_REDIRECT_HOSTS, hubEndpoint } from '../../src/huggingface/endpoint.ts';
import { HubError, HubReason } from '../../src/huggingface/errors.ts';
import { listRepoFiles } from '../../src/huggingface/files.ts';
import { lfsLocations, type RedirectPolicy } from '../../src/huggingface/locations.ts';
import { hostAllowed, parseHostRules } from '../../src/policy/reach.ts';
import { startHubEmulator, type HubEmulator } from '../support/hub-emulator.ts';

const FLAG = '--allowed-hub-redirect-hosts';
const policy = (hosts: string): RedirectPolicy => ({ hosts: parseHostRules(hosts), flag: FLAG });

describe("an LFS file's redirect", () => {
  let hub: HubEmulator;
  /** Where the hostile Hub sends `weights.bin` now; undefined: its own CDN. */
  let target: string | undefined;
  /** Where it sends `extra.bin`; undefined: its own CDN. */
  let extra: string | undefined;
  const dispatcher = new Agent();
  const client = () => new HubClient({ endpoint: hubEndpoint(hub.url, '127.0.0.1'), dispatcher });

  beforeAll(async () => {
    hub = await startHubEmulator({
      repos: [
        {
          id: 'org/m',
          commits: [
            {
              'config.json': '{}',
              'weights.bin': { content: Buffer.alloc(100, 1), lfs: true },
              'extra.bin': { content: Buffer.alloc(50, 2), lfs: true },
            },
          ],
        },
      ],
      redirectOf: (path) => (path === 'weights.bin' ? target : extra),
    });
  });
  afterAll(async () => {
    await hub.close();
    await dispatcher.close();
  });

  const locate = async (p: RedirectPolicy) => {
    const c = client();
    return lfsLocations(c, await listRepoFiles(c, 'org/m', 'main'), p);
  };

  it.each([
    ['a link-local metadata address', 'http://169.254.169.254/latest/meta-data/iam/'],
    ['a cluster-internal Service', 'http://kubernetes.default.svc/api/v1/secrets'],
    ['a cluster IP', 'https://10.96.0.1/api/v1/namespaces'],
    ['loopback', 'http://127.0.0.2:8080/internal-state'],
    [
      "another tenant's private bucket",
      'https://tenant-a.s3.amazonaws.com/weights.bin?X-Amz-Signature=abc&X-Amz-Credential=AKIA',
    ],
  ])('to %s is refused: the reason names the file and the flag, not the URL', async (_what, url) => {
    target = url;
    extra = undefined;
    // The emulator's CDN is allowed here, so only the hostile redirect is refused.
    const err = await locate(policy('http://127.0.0.1')).then(
      () => undefined,
      (e: unknown) => e,
    );
    expect(err).toBeInstanceOf(HubError);
    const e = err as HubError;
    expect(e.reason).toBe(HubReason.RedirectNotAllowed);
    expect(e.field).toBe('endpoint');
    expect(e.message).toContain('weights.bin');
    expect(e.message).toContain(`not in ${FLAG} (http://127.0.0.1)`);
    expect(e.message).toContain(new URL(url).host);
    expect(e.message).toContain('(HubRedirectNotAllowed)');
    expect(e.message).not.toContain(url);
    expect(e.message).not.toContain(new URL(url).pathname);
    expect(e.message).not.toContain('X-Amz-Signature');
    expect(e.retryable).toBe(false);
  });

  it('to the admin-listed CDN, or to the Hub itself, is kept', async () => {
    target = undefined;
    const found = await locate(policy('http://127.0.0.1'));
    expect(found.get('weights.bin')!.startsWith(`${hub.cdnURL}/repos/`)).toBe(true);
    // The Hub redirecting to its own origin (same host and port) reaches nothing its endpoint does not.
    target = `${hub.url}/org/m/resolve/main/config.json`;
    extra = `${hub.url}/org/m/resolve/main/extra-copy.bin`;
    const own = await locate(policy(''));
    expect(own.get('weights.bin')).toBe(target);
    expect(own.get('extra.bin')).toBe(extra);
    // Its own host on another port is another origin: the emulator's CDN, not listed, is refused.
    extra = undefined;
    await expect(locate(policy(''))).rejects.toMatchObject({ reason: HubReason.RedirectNotAllowed });
    target = undefined;
  });

  it('to a host listed without a scheme, over plain HTTP, is refused: a bare entry allows https only', async () => {
    target = undefined;
    extra = undefined;
    // The emulator's CDN speaks plain HTTP; its signed URL would read the file for whoever sees it in clear.
    const e = (await locate(policy('127.0.0.1')).then(
      () => undefined,
      (err: unknown) => err,
    )) as HubError;
    expect(e).toBeInstanceOf(HubError);
    expect(e.reason).toBe(HubReason.RedirectNotAllowed);
    expect(e.message).toContain(`which ${FLAG} (127.0.0.1) allows over https only`);
    expect(e.message).toContain(`an admin adds http://${new URL(hub.cdnURL).host}`);
    await expect(locate(policy('http://127.0.0.1'))).resolves.toBeInstanceOf(Map);
  });

  it("allows the public Hub's CDNs by default, and no address literal nor cluster name", () => {
    const rules = parseHostRules(DEFAULT_HUB_REDIRECT_HOSTS);
    for (const ok of [
      'https://cdn-lfs.hf.co/repos/aa/bb/x',
      'https://cdn-lfs-us-1.hf.co/repos/aa/bb/x',
      'https://cdn-lfs-eu-1.hf.co/repos/aa/bb/x',
      'https://cdn-lfs.huggingface.co/repos/aa/bb/x',
      'https://cdn-lfs-us-1.huggingface.co/repos/aa/bb/x',
      'https://cas-bridge.xethub.hf.co/xet-bridge-us/x',
      'https://us.aws.cdn.hf.co/xet-bridge-us/x',
    ])
      expect(hostAllowed(ok, rules), ok).toBe(true);
    for (const no of [
      'http://169.254.169.254/latest/meta-data/',
      'http://[fd00:ec2::254]/',
      'https://10.96.0.1/',
      'http://127.0.0.1:8080/',
      'http://kubernetes.default.svc/',
      'https://evil.example/cdn-lfs.hf.co/x',
      'https://cdn-lfs.hf.co.evil.example/x',
      'https://hf.co/x',
      'https://s3.amazonaws.com/bucket/x',
    ])
      expect(hostAllowed(no, rules), no).toBe(false);
  });
});
