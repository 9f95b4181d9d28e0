/**
 * The Hub client against the Hub emulator (held to huggingface_hub by test/e2e/hub-emulator-client.test.ts):
 * revisions resolved to commits, the tree listed at the commit (nested paths, sizes, LFS sha256, pages), the
 * selection and its caps, the listing time-out, and every refusal as a typed error naming the field to change,
 * never with the token in it.
 */
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { createHash } from 'node:crypto';
import { Agent } from 'undici';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ModelVersionSpecSchema } from '../../src/place/spec.ts';
import { HubClient } from '../../src/huggingface/client.ts';
import { hubEndpoint, resolveURL } from '../../src/huggingface/endpoint.ts';
import { HubError, HubReason, hubBudget } from '../../src/huggingface/errors.ts';
import { listRepoFiles } from '../../src/huggingface/files.ts';
import type { SourceBounds } from '../../src/http/budget.ts';
import { lfsLocations } from '../../src/huggingface/locations.ts';
import { parseHostRules } from '../../src/policy/reach.ts';
import { hubVersionSpec } from '../../src/huggingface/version-spec.ts';
import { taskID } from '../../src/storage/taskid.ts';
import { forgetSecrets, rememberSecret } from '../../src/redact.ts';
import { startHubEmulator, type HubEmulator } from '../support/hub-emulator.ts';

/** The emulator's CDN listens on loopback, as an admin would list a mirror's CDN. */
const LOOPBACK_REDIRECTS = {
  hosts: parseHostRules('http://127.0.0.1'),
  flag: '--allowed-hub-redirect-hosts',
};

const TOKEN = 'hf_unitGrantedToken0123456789abcdef';
const OTHER = 'hf_unitOtherToken0123456789abcdefgh';
const big = Buffer.alloc(70_000, 7);
const sha256 = (b: Buffer | string) => createHash('sha256').update(b).digest('hex');
const v1 = {
  'config.json': '{"a":1}',
  'weights/model-00001.safetensors': { content: big, lfs: true },
  'weights/model-00002.safetensors': { content: Buffer.alloc(10, 1), lfs: true },
  'tokenizer/vocab.txt': 'x y z',
  '.gitattributes': '*.safetensors filter=lfs',
};

describe('the Hugging Face Hub client', () => {
  let hub: HubEmulator;
  const dispatcher = new Agent();
  const client = (
    token?: string,
    opts: { tokenHosts?: string; url?: string; bounds?: Partial<SourceBounds> } = {},
  ) => {
    const url = opts.url ?? hub.url;
    return new HubClient({
      endpoint: hubEndpoint(url, opts.tokenHosts ?? 'http://127.0.0.1'),
      dispatcher,
      token,
      budget: hubBudget(url, 'org/model', opts.bounds),
    });
  };
  const refusal = async (p: Promise<unknown>): Promise<HubError> => {
    const e = await p.then(
      () => undefined,
      (err: unknown) => err,
    );
    expect(e).toBeInstanceOf(HubError);
    return e as HubError;
  };

  beforeAll(async () => {
    hub = await startHubEmulator({
      repos: [
        { id: 'org/model', commits: [v1, { ...v1, 'config.json': '{"a":2}' }], refs: { main: 1, 'v1.0': 0 } },
        { id: 'org/gated', commits: [v1], gated: true },
        { id: 'org/private', commits: [v1], private: true },
        { id: 'org/empty', commits: [{}] },
      ],
      tokens: { [TOKEN]: ['org/gated', 'org/private'], [OTHER]: [] },
      treePageSize: 2,
      renamed: { 'old-org/gated-v0': 'org/gated' },
    });
  });
  afterAll(async () => {
    await hub.close();
    await dispatcher.close();
    forgetSecrets();
  });

  it('resolves a branch, a tag and a commit sha to commits, and a moved branch to its new commit', async () => {
    const [c0, c1] = hub.repos.get('org/model')!.commits;
    expect(await client().resolveRevision('org/model', 'main')).toBe(c1!.sha);
    expect(await client().resolveRevision('org/model', 'v1.0')).toBe(c0!.sha);
    expect(await client().resolveRevision('org/model', c0!.sha)).toBe(c0!.sha);
    hub.setRef('org/model', 'main', 0);
    try {
      expect(await client().resolveRevision('org/model', 'main')).toBe(c0!.sha);
    } finally {
      hub.setRef('org/model', 'main', 1);
    }
  });

  it('lists every file at the commit across pages: nested paths, sizes, LFS sha256 for LFS files only', async () => {
    const listing = await listRepoFiles(client(), 'org/model', 'v1.0');
    expect(listing.sha).toBe(hub.repos.get('org/model')!.commits[0]!.sha);
    expect(listing.files.map((f) => f.path)).toEqual([
      '.gitattributes',
      'config.json',
      'tokenizer/vocab.txt',
      'weights/model-00001.safetensors',
      'weights/model-00002.safetensors',
    ]);
    const weights = listing.files.find((f) => f.path === 'weights/model-00001.safetensors')!;
    expect(weights).toMatchObject({ size: big.length, sha256: sha256(big) });
    expect(listing.files.find((f) => f.path === 'config.json')).toMatchObject({ size: 7, sha256: undefined });
    // Pages of two: the listing followed the Link header to the end, every page at the commit.
    const pages = hub.hubRequests.filter((r) => r.url.includes(`/tree/${listing.sha}`));
    expect(pages.length).toBeGreaterThanOrEqual(4);
  });

  it('applies include/exclude globs to the paths', async () => {
    const listing = await listRepoFiles(client(), 'org/model', 'main', {
      include: ['**/*.safetensors', '*.json'],
      exclude: ['**/model-00002.*'],
    });
    expect(listing.files.map((f) => f.path)).toEqual(['config.json', 'weights/model-00001.safetensors']);
  });

  it('refuses a selection over maxFiles or maxBytes, and one that keeps nothing, naming the field', async () => {
    const files = await refusal(listRepoFiles(client(), 'org/model', 'main', { maxFiles: 2 }));
    expect(files).toMatchObject({ reason: HubReason.TooLarge, field: 'maxFiles' });
    expect(files.message).toMatch(/5 files .* above maxFiles 2/);
    const bytes = await refusal(listRepoFiles(client(), 'org/model', 'main', { maxBytes: 1000 }));
    expect(bytes).toMatchObject({ reason: HubReason.TooLarge, field: 'maxBytes' });
    const none = await refusal(listRepoFiles(client(), 'org/model', 'main', { include: ['*.gguf'] }));
    expect(none).toMatchObject({ reason: HubReason.NoFiles, field: 'include' });
  });

  it('refuses a revision without files', async () => {
    const e = await refusal(listRepoFiles(client(), 'org/empty', 'main'));
    expect(e).toMatchObject({ reason: HubReason.NoFiles, field: 'revision' });
    expect(e.message).toContain('org/empty at ');
  });

  it('bounds the entries a listing holds', async () => {
    const e = await refusal(
      listRepoFiles(client(undefined, { bounds: { maxEntries: 3 } }), 'org/model', 'main'),
    );
    expect(e).toMatchObject({ reason: HubReason.SourceTooLarge, field: 'repo', kind: 'terminal' });
    expect(e.message).toContain('the repository holds more than 3 entries');
  });

  it('an unknown revision is RevisionNotFound on the revision field', async () => {
    const e = await refusal(listRepoFiles(client(), 'org/model', 'no-such-branch'));
    expect(e).toMatchObject({
      reason: HubReason.RevisionNotFound,
      field: 'revision',
      status: 404,
      kind: 'notFound',
    });
    expect(e.message).toContain('has no revision "no-such-branch"');
  });

  it('a gated repository lists without a token but its files want one: TokenRequired, then Forbidden', async () => {
    const none = await refusal(listRepoFiles(client(), 'org/gated', 'main'));
    expect(none).toMatchObject({
      reason: HubReason.TokenRequired,
      field: 'token',
      status: 401,
      kind: 'auth',
    });
    expect(none.message).toContain('org/gated is gated');
    const other = await refusal(listRepoFiles(client(OTHER), 'org/gated', 'main'));
    expect(other).toMatchObject({ reason: HubReason.Forbidden, status: 403 });
    expect(other.message).toContain('request access');
    const ok = await listRepoFiles(client(TOKEN), 'org/gated', 'main');
    expect(ok.files).toHaveLength(5);
  });

  it('a private repository is TokenRequired without a token, RepoNotFound with a token not granted it', async () => {
    const none = await refusal(listRepoFiles(client(), 'org/private', 'main'));
    expect(none).toMatchObject({ reason: HubReason.TokenRequired, status: 401 });
    expect(none.message).toContain('private or does not exist');
    const other = await refusal(listRepoFiles(client(OTHER), 'org/private', 'main'));
    expect(other).toMatchObject({ reason: HubReason.RepoNotFound, field: 'repo', status: 404 });
    expect((await listRepoFiles(client(TOKEN), 'org/private', 'main')).files).toHaveLength(5);
  });

  it('an unknown token is TokenRejected, and no message holds a token', async () => {
    rememberSecret('hf_unknownToken0123456789abcdefghij');
    const e = await refusal(
      listRepoFiles(client('hf_unknownToken0123456789abcdefghij'), 'org/model', 'main'),
    );
    expect(e).toMatchObject({ reason: HubReason.TokenRejected, status: 401 });
    expect(e.message).not.toContain('hf_unknownToken');
  });

  it('sends a token only to an allowed host: the public Hub by default', () => {
    expect(() => client(TOKEN, { tokenHosts: 'huggingface.co' })).toThrow(HubError);
    try {
      client(TOKEN, { tokenHosts: 'huggingface.co' });
    } catch (e) {
      expect(e).toMatchObject({ reason: HubReason.TokenNotAllowed, field: 'endpoint' });
      expect((e as Error).message).toContain('huggingface.co');
      expect((e as Error).message).not.toContain(TOKEN);
    }
    expect(() => client(undefined, { tokenHosts: 'huggingface.co' })).not.toThrow();
    expect(hubEndpoint().url).toBe('https://huggingface.co');
  });

  it('sends no token over plain HTTP to a host allowed over https only, and says so (not a network error)', () => {
    let err: unknown;
    try {
      client(TOKEN, { tokenHosts: '127.0.0.1' });
    } catch (e) {
      err = e;
    }
    expect(err).toMatchObject({ reason: HubReason.TokenNotAllowed, field: 'endpoint' });
    const m = (err as Error).message;
    expect(m).toContain(`the endpoint ${hub.url} is plain HTTP`);
    expect(m).toContain('ask an admin to allow http://127.0.0.1:');
    expect(m).not.toContain('network error');
    expect(m).not.toContain(TOKEN);
  });

  describe('against a misbehaving server', () => {
    let server: Server;
    let url: string;
    let answer: (path: string, res: import('node:http').ServerResponse) => void = () => undefined;
    beforeAll(async () => {
      server = createServer((req, res) => answer(req.url ?? '/', res));
      await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
      url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
    });
    afterAll(async () => {
      server.closeAllConnections();
      await new Promise((r) => server.close(r));
    });

    it('a listing that does not finish in time is SourceTimeout, tried again later', async () => {
      answer = () => undefined; // never answers
      const e = await refusal(
        listRepoFiles(client(undefined, { url, bounds: { timeoutMs: 300 } }), 'org/model', 'main'),
      );
      expect(e).toMatchObject({ reason: HubReason.SourceTimeout, kind: 'retryable', field: 'endpoint' });
    });

    it('an answer body over the bound is SourceTooLarge, not read whole', async () => {
      answer = (_p, res) => res.writeHead(200, { 'content-type': 'application/json' }).end('x'.repeat(5000));
      const c = new HubClient({ endpoint: hubEndpoint(url, ''), dispatcher, maxResponseBytes: 1000 });
      const e = await refusal(c.resolveRevision('org/model', 'main'));
      expect(e).toMatchObject({ reason: HubReason.SourceTooLarge, field: 'endpoint' });
      expect(e.message).toContain('larger than 1000 bytes');
    });

    it('a page link to another origin stops the listing (the token would follow it)', async () => {
      const sha = 'a'.repeat(40);
      answer = (path, res) => {
        if (path.includes('/revision/'))
          return res.writeHead(200).end(JSON.stringify({ id: 'org/model', sha }));
        res
          .writeHead(200, { link: '<http://127.0.0.9:1/api/models/org/model/tree/x?cursor=1>; rel="next"' })
          .end(JSON.stringify([{ type: 'file', path: 'a', size: 1, oid: 'b' }]));
      };
      const e = await refusal(listRepoFiles(client(TOKEN, { url }), 'org/model', 'main'));
      expect(e.reason).toBe(HubReason.BadAnswer);
      expect(e.message).toContain('leaves the endpoint');
    });

    it("a 5xx is Unavailable and retryable, in our words: none of the server's text is kept", async () => {
      answer = (_p, res) =>
        res
          .writeHead(503, { 'x-error-message': 'metadata-token-xyz in a header' })
          .end('AKIAPLANTEDBODYLINE0 metadata-token-xyz\nsecond line');
      const e = await refusal(client(TOKEN, { url }).resolveRevision('org/model', 'main'));
      expect(e).toMatchObject({ reason: HubReason.Unavailable, kind: 'retryable', status: 503 });
      expect(e.message).toContain('HTTP 503');
      expect(e.message).toContain('the Hub is unavailable');
      expect(e.message).not.toMatch(/metadata-token-xyz|AKIAPLANTED|second line/);
      expect(JSON.stringify(e)).not.toMatch(/metadata-token-xyz|AKIAPLANTED/);
    });

    it('an X-Error-Code is repeated only when it is one the Hub sends', async () => {
      answer = (_p, res) => res.writeHead(404, { 'x-error-code': 'metadata-token-xyz' }).end('AKIAPLANTED');
      let e = await refusal(client(undefined, { url }).resolveRevision('org/model', 'main'));
      expect(e.reason).toBe(HubReason.BadAnswer);
      expect(`${e.message} ${String(e.code)}`).not.toMatch(/metadata-token-xyz|AKIAPLANTED/);
      answer = (_p, res) => res.writeHead(404, { 'x-error-code': 'RevisionNotFound' }).end('AKIAPLANTED');
      e = await refusal(client(undefined, { url }).resolveRevision('org/model', 'main'));
      expect(e.reason).toBe(HubReason.RevisionNotFound);
      expect(e.message).toContain('(RevisionNotFound)');
      expect(e.message).not.toContain('AKIAPLANTED');
    });

    it('a redirect loop on the endpoint stops after 5 hops: a BadAnswer, not a hang or a crash', async () => {
      let calls = 0;
      answer = (path, res) => {
        calls++;
        res.writeHead(307, { location: path }).end();
      };
      const e = await refusal(client(TOKEN, { url }).resolveRevision('org/model', 'main'));
      expect(e.reason).toBe(HubReason.BadAnswer);
      expect(e.message).toContain('more than 5 redirects in a row');
      expect(calls).toBe(6);
    });

    it('an API redirect to another origin is not followed: the token never goes there', async () => {
      const elsewhere: string[] = [];
      const other = createServer((req, res) => {
        elsewhere.push(req.url ?? '');
        res.writeHead(200).end(JSON.stringify({ id: 'org/model', sha: 'b'.repeat(40) }));
      });
      await new Promise<void>((r) => other.listen(0, '127.0.0.1', r));
      const otherURL = `http://127.0.0.1:${(other.address() as AddressInfo).port}`;
      try {
        answer = (path, res) => res.writeHead(307, { location: `${otherURL}${path}?sig=secret` }).end();
        const e = await refusal(client(TOKEN, { url }).resolveRevision('org/model', 'main'));
        expect(e.reason).toBe(HubReason.BadAnswer);
        expect(e.message).toContain(`a redirect off the endpoint (to ${otherURL}), not followed`);
        expect(e.message).not.toContain('sig=secret');
        expect(elsewhere).toEqual([]);
      } finally {
        other.closeAllConnections();
        await new Promise((r) => other.close(r));
      }
    });

    it("an answer that is not the Hub's is a BadAnswer", async () => {
      answer = (_p, res) => res.writeHead(200).end('<html>captive portal</html>');
      const e = await refusal(client(undefined, { url }).resolveRevision('org/model', 'main'));
      expect(e.reason).toBe(HubReason.BadAnswer);
      expect(e.message).toContain('is the endpoint a Hugging Face Hub?');
    });
  });

  it("a renamed repository: the Hub's 307 to the new name is followed, and the files' URLs use the new name", async () => {
    const before = hub.hubRequests.length;
    const c = client(TOKEN);
    const listing = await listRepoFiles(c, 'old-org/gated-v0', 'main');
    expect(listing.sha).toBe(hub.repos.get('org/gated')!.commits[0]!.sha);
    expect([listing.repo, listing.movedTo]).toEqual(['old-org/gated-v0', 'org/gated']);
    // One redirect (the revision's), relative as the Hub sends it; the tree and the HEAD go to the new name.
    const moved = hub.hubRequests.slice(before).filter((r) => r.status === 307);
    expect(moved.map((r) => r.url)).toEqual([`/api/models/old-org/gated-v0/revision/main`]);
    const spec = ModelVersionSpecSchema.parse(
      hubVersionSpec(
        hubEndpoint(hub.url, 'http://127.0.0.1'),
        listing,
        await lfsLocations(c, listing, LOOPBACK_REDIRECTS),
        {
          headers: c.authHeaders(),
        },
      ),
    );
    expect(spec.directory).toBe('old-org/gated-v0');
    const config = spec.files.find((f) => f.path === 'config.json')!;
    expect(config.url).toBe(`${hub.url}/org/gated/resolve/${listing.sha}/config.json`);
    expect(config.headerSet).toBe('hub');
    expect(spec.headerSets).toEqual({ hub: { authorization: `Bearer ${TOKEN}` } });
    const w = spec.files.find((f) => f.path === 'weights/model-00001.safetensors')!;
    expect(w.url!.startsWith(`${hub.cdnURL}/repos/`)).toBe(true);
    // A resolve HEAD at the old name follows the rename on the endpoint, and stops at the CDN's redirect.
    const sha = listing.sha;
    expect(await c.fileLocation('old-org/gated-v0', sha, 'config.json')).toBe(
      `${hub.url}/org/gated/resolve/${sha}/config.json`,
    );
    const lfs = await c.fileLocation('old-org/gated-v0', sha, 'weights/model-00001.safetensors');
    expect(lfs!.startsWith(`${hub.cdnURL}/repos/`)).toBe(true);
    expect(hub.cdnRequests.some((r) => r.method === 'HEAD')).toBe(false);
  });

  it("makes the agent's version: git files at their resolve URL with the token, LFS files at the CDN without it", async () => {
    const endpoint = hubEndpoint(hub.url, 'http://127.0.0.1');
    const c = client(TOKEN);
    const listing = await listRepoFiles(c, 'org/gated', 'main');
    const spec = ModelVersionSpecSchema.parse(
      hubVersionSpec(endpoint, listing, await lfsLocations(c, listing, LOOPBACK_REDIRECTS), {
        headers: c.authHeaders(),
      }),
    );
    expect(spec.version).toBe(listing.sha);
    expect(spec.directory).toBe('org/gated');
    expect(spec.headers).toBeUndefined();
    const w = spec.files.find((f) => f.path === 'weights/model-00001.safetensors')!;
    expect(w.url!.startsWith(`${hub.cdnURL}/repos/`)).toBe(true);
    expect(w.headers).toBeUndefined();
    expect(w.sha256).toBe(sha256(big));
    const config = spec.files.find((f) => f.path === 'config.json')!;
    expect(config.url).toBe(`${hub.url}/org/gated/resolve/${listing.sha}/config.json`);
    // The token once, in the spec's `hub` header set; the git files name it, the CDN files do not.
    expect(config.headers).toBeUndefined();
    expect(config.headerSet).toBe('hub');
    expect(w.headerSet).toBeUndefined();
    expect(spec.headerSets).toEqual({ hub: { authorization: `Bearer ${TOKEN}` } });
    expect(JSON.stringify(spec).split(TOKEN)).toHaveLength(2);
    expect(config.sha256).toBeUndefined();
    // Every query parameter of the CDN URLs is left out of the ids: a later redirect, signed anew, is the same task.
    expect(spec.filter).toEqual(
      expect.arrayContaining(['X-Amz-Signature', 'X-Amz-Date', 'response-content-disposition']),
    );
    await new Promise((r) => setTimeout(r, 1100)); // the next signature has another X-Amz-Date
    const again = ModelVersionSpecSchema.parse(
      hubVersionSpec(endpoint, listing, await lfsLocations(c, listing, LOOPBACK_REDIRECTS), {
        headers: c.authHeaders(),
      }),
    );
    const w2 = again.files.find((f) => f.path === w.path)!;
    expect(w2.url).not.toBe(w.url);
    const id = (url: string) => taskID({ url, filter: spec.filter!, rule: '1.4' });
    expect(id(w2.url!)).toBe(id(w.url!));
    expect(resolveURL(endpoint, 'org/m', 'refs/pr/1', 'a b/c#d.txt')).toBe(
      `${hub.url}/org/m/resolve/refs%2Fpr%2F1/a%20b/c%23d.txt`,
    );
  });

  it("the agent's spec takes a file's own headers, but never the daemon's", () => {
    const ok = ModelVersionSpecSchema.safeParse({
      version: 'v1',
      files: [{ path: 'a', url: 'http://127.0.0.1:1/a', headers: { authorization: 'Bearer x' } }],
    });
    expect(ok.success).toBe(true);
    const bad = ModelVersionSpecSchema.safeParse({
      version: 'v1',
      files: [{ path: 'a', url: 'http://127.0.0.1:1/a', headers: { 'X-Dragonfly-Tag': 't' } }],
    });
    expect(bad.success).toBe(false);
    expect(bad.error!.issues[0]!.path).toEqual(['files', 0, 'headers', 'X-Dragonfly-Tag']);
  });
});
