/**
 * The Hub and registry clients against a tenant's hostile look-alikes (test/support/hostile-sources.ts), each
 * resolution read through one budget (src/http/budget.ts): huge entries across pages, entries over their length,
 * endless pages, a dripping answer, LFS HEADs that each answer within a request's time-out but never all within a
 * resolution's; a 1 MiB token, a huge challenge, an endless manifest, dripping manifests and tokens. Each ends in a
 * SourceTooLarge or SourceTimeout that says which bound, having read little, in about the time of its bound.
 */
import { Agent } from 'undici';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { HubClient } from '../../src/huggingface/client.ts';
import { hubEndpoint } from '../../src/huggingface/endpoint.ts';
import { HubError, HubReason, hubBudget } from '../../src/huggingface/errors.ts';
import { listRepoFiles } from '../../src/huggingface/files.ts';
import { lfsLocations } from '../../src/huggingface/locations.ts';
import { parseHostRules } from '../../src/policy/reach.ts';
import { RegistryClient } from '../../src/oci/client.ts';
import { OciError, OciReason, ociBudget } from '../../src/oci/errors.ts';
import { parseReference } from '../../src/oci/reference.ts';
import type { SourceBounds } from '../../src/http/budget.ts';
import {
  SLOW_HEAD_FILES,
  SLOW_HEAD_MS,
  startHostileSources,
  type HostileSources,
} from '../support/hostile-sources.ts';

let hostile: HostileSources;
const dispatcher = new Agent();
beforeAll(async () => {
  hostile = await startHostileSources();
});
afterAll(async () => {
  await hostile?.close();
  await dispatcher.close();
});

async function refusal<E>(p: Promise<unknown>, type: new (...a: never[]) => E): Promise<E> {
  const e = await p.then(
    () => undefined,
    (err: unknown) => err,
  );
  expect(e).toBeInstanceOf(type);
  return e as E;
}

describe("a tenant's hostile Hub", () => {
  const client = (mode: string, bounds: Partial<SourceBounds> = {}) =>
    new HubClient({
      endpoint: hubEndpoint(hostile.url, ''),
      dispatcher,
      budget: hubBudget(hostile.url, `hostile/${mode}`, bounds),
    });
  const list = (mode: string, bounds?: Partial<SourceBounds>) =>
    refusal(listRepoFiles(client(mode, bounds), `hostile/${mode}`, 'main'), HubError);

  it('tree pages of one 12 MiB entry each: the first page is over its cap, nothing more is asked', async () => {
    const e = await list('huge-entries');
    expect(e).toMatchObject({ reason: HubReason.SourceTooLarge, field: 'endpoint', kind: 'terminal' });
    expect(e.message).toMatch(
      /an answer was larger than 4194304 bytes: check that the endpoint .* is a Hugging Face Hub/,
    );
    expect(hostile.requests.get('huge-entries')).toBe(2); // the revision and the first page
  });

  it("entries under a page's cap but over an entry's length are refused at the first", async () => {
    const e = await list('long-entries');
    expect(e).toMatchObject({ reason: HubReason.SourceTooLarge, field: 'endpoint' });
    expect(e.message).toContain('an entry of the repository is longer than 4096 characters');
    expect(hostile.requests.get('long-entries')).toBe(2);
  });

  it('endless pages of correct entries end at the bound of what the listing keeps', async () => {
    const heap = process.memoryUsage().heapUsed;
    const e = await list('endless');
    expect(e).toMatchObject({ reason: HubReason.SourceTooLarge, field: 'repo' });
    expect(e.message).toMatch(
      /the entries passed 8388608 characters together|holds more than 100000 entries/,
    );
    // 8 Mi characters of paths at most were kept: the pages asked for stop below 100.
    expect(hostile.requests.get('endless')).toBeLessThanOrEqual(101);
    expect(process.memoryUsage().heapUsed - heap).toBeLessThan(200 * 1024 * 1024);
  });

  it('a dripping answer ends at the resolution deadline, tried again later', async () => {
    const started = performance.now();
    const e = await list('drip', { timeoutMs: 500 });
    expect(performance.now() - started).toBeLessThan(3_000);
    expect(e).toMatchObject({ reason: HubReason.SourceTimeout, kind: 'retryable', field: 'endpoint' });
    expect(e.message).toContain('did not complete within 500 ms');
  });

  it('the LFS HEAD phase has one deadline: HEADs each within their time-out never add up past it', async () => {
    const c = client('slow-heads', { timeoutMs: 1_500 });
    const listing = await listRepoFiles(c, 'hostile/slow-heads', 'main');
    expect(listing.files).toHaveLength(SLOW_HEAD_FILES);
    const started = performance.now();
    const e = await refusal(
      lfsLocations(c, listing, {
        hosts: parseHostRules('http://127.0.0.1'),
        flag: '--allowed-hub-redirect-hosts',
      }),
      HubError,
    );
    // Without the deadline: SLOW_HEAD_FILES / 8 rounds of SLOW_HEAD_MS each, half a minute.
    expect(performance.now() - started).toBeLessThan(SLOW_HEAD_MS);
    expect(e).toMatchObject({ reason: HubReason.SourceTimeout, kind: 'retryable' });
    c.budget.close();
  });
});

describe("a tenant's hostile registry", () => {
  const manifest = (mode: string, bounds: Partial<SourceBounds> = {}, maxManifestBytes?: number) => {
    const ref = parseReference(`${hostile.host}/hostile/${mode}:v1`);
    const budget = ociBudget(ref.registry, bounds);
    const client = new RegistryClient(ref.registry, {
      dispatcher,
      plainHTTP: true,
      budget,
      maxManifestBytes,
    });
    return refusal(
      client.manifest(ref).finally(() => budget.close()),
      OciError,
    );
  };

  it('a 1 MiB token answer is refused before it is held, let alone copied', async () => {
    const e = await manifest('hugetoken');
    expect(e.reason).toBe(OciReason.SourceTooLarge);
    expect(e.message).toMatch(/the token service answer for .* was larger than 65536 bytes/);
    expect(e.message.length).toBeLessThan(1_000);
  });

  it('a huge challenge is refused before it is parsed', async () => {
    const e = await manifest('hugechallenge');
    expect(e.reason).toBe(OciReason.SourceTooLarge);
    expect(e.message).toContain('longer than 4096 characters');
  });

  it('an endless manifest stops at its cap', async () => {
    const sent = hostile.bytesSent();
    const e = await manifest('hugemanifest', {}, 1024 * 1024);
    expect(e.reason).toBe(OciReason.SourceTooLarge);
    expect(e.message).toMatch(/the registry answer for .* was larger than 1048576 bytes/);
    expect(hostile.bytesSent() - sent).toBeLessThan(16 * 1024 * 1024);
  });

  it('a dripping manifest or token ends at the resolution deadline', async () => {
    for (const mode of ['slow', 'slowtoken']) {
      const started = performance.now();
      const e = await manifest(mode, { timeoutMs: 500 });
      expect(performance.now() - started, mode).toBeLessThan(3_000);
      expect(e.reason, mode).toBe(OciReason.SourceTimeout);
      expect(e.message).toContain('did not complete within 500 ms');
    }
  });
});
