/**
 * A ServedModel whose model is a Hugging Face repository (spec.source.huggingface) against the real apiserver, the
 * Hub emulator and the operator (the ServedModel controller with a model-server driver that loads directories and
 * records each registration): the revision is resolved to a commit once per generation (status.source), each
 * replica registers the files at that commit (nested paths, an LFS file above 4 MiB at the CDN with its sha256,
 * small git files at their resolve URL), a moved branch changes nothing until the refresh annotation takes a new
 * value, and a private repository works with a token (only in its git files' headers) and is Stalled, naming the
 * field, without one.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import * as k8s from '@kubernetes/client-node';
import { waitFor } from '../support/kube.ts';
import type { HubEmulator } from '../support/hub-emulator.ts';
import { startHubBed, tinyAndPrivate, type HubBed } from '../support/hub-bed.ts';
import { modelPreheatController } from '../../src/controllers/modelpreheat/index.ts';
import { taskID } from '../../src/storage/taskid.ts';
import { hubTokenTag } from '../../src/storage/credential-tag.ts';
import { createServedModelController } from '../../src/controllers/index.ts';
import { ModelServerDrivers } from '../../src/servers/driver.ts';
import { DirectoryDriver } from '../support/directory-driver.ts';
import type { ServedModel } from '../../src/api/index.ts';
import type { PeerloadNamespace } from '../support/resources.ts';

/** The recording driver places nothing itself, but a source's spec names the agent beside each replica. */
const AGENT = { port: 8200, tokenSecretRef: { name: 'agent', key: 'token' } };

const ENDPOINTS = ['http://198.18.9.1:8000', 'http://198.18.9.2:8000'];
const TOKEN = 'hf_integrationHubToken0123456789abcdef';
const WEIGHTS = Buffer.alloc(5 * 1024 * 1024 + 17, 9);
const HOSTILE_TARGET = 'http://169.254.169.254/latest/meta-data/iam/security-credentials/';

let bed: HubBed;
let kc: k8s.KubeConfig;
let sms: PeerloadNamespace;
let ns: string;
let hub: HubEmulator;
const driver = new DirectoryDriver(ENDPOINTS);

beforeAll(async () => {
  bed = await startHubBed({
    namespace: 'sm-hub',
    hub: {
      repos: [
        ...tinyAndPrivate(WEIGHTS),
        {
          id: 'org/hostile',
          commits: [{ 'config.json': '{}', 'weights/metadata.bin': { content: 'x', lfs: true } }],
        },
      ],
      tokens: { [TOKEN]: ['org/private'] },
      // A hostile Hub: this file's redirect names the cloud metadata address (link-local).
      redirectOf: (path) => (path === 'weights/metadata.bin' ? HOSTILE_TARGET : undefined),
    },
    token: TOKEN,
    flags: ['--allowed-endpoint-hosts', '198.18.0.0/16'],
    controllers: [
      modelPreheatController,
      (ctx) => createServedModelController(ctx, { drivers: new ModelServerDrivers([driver]) }),
    ],
  });
  ({ kc, ns, hub, resources: sms } = bed);
}, 180_000);

afterAll(async () => {
  await bed?.close();
});

const get = (name: string) => sms.getServedModel(name);

const create = (
  name: string,
  huggingface: Record<string, unknown>,
  endpoints = ENDPOINTS,
  extra: Record<string, unknown> = {},
) =>
  sms.createServedModel(name, {
    modelName: name,
    source: { huggingface: { endpoint: hub.url, ...huggingface } },
    modelServer: { endpoints, driver: 'directories', agent: AGENT },
    ...extra,
  });

const annotate = (name: string, value: string) =>
  sms.patchServedModel(name, { metadata: { annotations: { 'peerload.io/refresh-source': value } } });

const condition = (o: ServedModel, type: string) => o.status?.conditions?.find((c) => c.type === type);

const readyWith = (name: string, commit: string) =>
  sms.untilServedModel(
    name,
    `Ready at ${commit.slice(0, 7)}`,
    (o) => condition(o, 'Ready')?.status === 'True' && o.status?.source?.huggingface?.commit === commit,
    { timeoutMs: 60_000, intervalMs: 200 },
  );

describe('a ServedModel from a Hugging Face repository', () => {
  it('is Ready with the commit in status, each replica given the files at that commit', async () => {
    const [c0] = hub.repos.get('org/tiny')!.commits;
    await create('tiny', { repo: 'org/tiny', exclude: ['.gitattributes'] });
    const sm = (await readyWith('tiny', c0!.sha))!;
    expect(sm.status!.source).toEqual({
      huggingface: { repo: 'org/tiny', revision: 'main', commit: c0!.sha },
      observedGeneration: sm.metadata.generation,
    });
    expect(sm.status!.ready).toBe('2/2');
    for (const server of driver.servers.values()) {
      expect(server.registered).toHaveLength(1);
      const files = server.registered[0]!.files!;
      expect(files.files.map((f) => f.path).sort()).toEqual([
        'config.json',
        'tokenizer/nested/vocab.txt',
        'weights/model.safetensors',
      ]);
      const lfs = files.files.find((f) => f.path === 'weights/model.safetensors')!;
      expect(lfs).toMatchObject({
        size: WEIGHTS.length,
        sha256: c0!.files.get('weights/model.safetensors')!.sha256,
      });
      expect(lfs.url!.startsWith(`${hub.cdnURL}/repos/`)).toBe(true);
      expect(files.files.find((f) => f.path === 'tokenizer/nested/vocab.txt')!.url).toBe(
        `${hub.url}/org/tiny/resolve/${c0!.sha}/tokenizer/nested/vocab.txt`,
      );
      expect(files.filter).toContain('X-Amz-Signature');
      // A public repository read without a token: no tag, its tasks shared by every tenant.
      expect(files.tag).toBeUndefined();
    }
  });

  it('a moved branch changes nothing until the annotation takes a new value or the spec changes', async () => {
    const [c0, c1] = hub.repos.get('org/tiny')!.commits;
    const server = driver.servers.get(ENDPOINTS[0]!)!;
    hub.setRef('org/tiny', 'main', 1);
    // Whatever passes run meanwhile, the commit of the generation stays.
    await new Promise((r) => setTimeout(r, 1500));
    expect((await get('tiny')).status!.source!.huggingface!.commit).toBe(c0!.sha);
    await annotate('tiny', 'a');
    const refreshed = (await readyWith('tiny', c1!.sha))!;
    expect(refreshed.status!.source!.refresh).toBe('a');
    // The replicas that serve the model keep what they placed: a new version rolls a new commit out.
    expect(server.registered).toHaveLength(1);
    hub.setRef('org/tiny', 'main', 0);
    await new Promise((r) => setTimeout(r, 1500));
    expect((await get('tiny')).status!.source!.huggingface!.commit).toBe(c1!.sha);
    await sms.patchServedModel('tiny', { spec: { version: '2' } });
    await readyWith('tiny', c0!.sha);
    await waitFor('both replicas at version 2', async () =>
      [...driver.servers.values()].every((s) => s.registered.length === 2) ? true : undefined,
    );
    for (const s of driver.servers.values()) {
      const reg = s.registered[1]!;
      expect(reg.version).toBe('2');
      expect(reg.files!.files.find((f) => f.path === 'config.json')!.url).toContain(`/resolve/${c0!.sha}/`);
    }
  });

  it('a private repository is Stalled without a token, naming the field, and Ready with one', async () => {
    await create('private-none', { repo: 'org/private' }, [ENDPOINTS[0]!]);
    const stalled = await sms.untilStalled('private-none', { timeoutMs: 60_000, intervalMs: 200 });
    expect(condition(stalled!, 'Stalled')).toMatchObject({
      reason: 'HubTokenRequired',
      message: expect.stringMatching(
        /^spec\.source\.huggingface\.tokenSecretRef: org\/private@main: .*private or does not exist/,
      ),
    });
    const [c0] = hub.repos.get('org/private')!.commits;
    await create('private-token', { repo: 'org/private', tokenSecretRef: { name: 'hf', key: 'token' } }, [
      ENDPOINTS[1]!,
    ]);
    const ok = (await readyWith('private-token', c0!.sha))!;
    expect(JSON.stringify(ok)).not.toContain(TOKEN);
    const reg = driver.servers.get(ENDPOINTS[1]!)!.registered.find((r) => r.modelName === 'private-token')!;
    // The token once, in the spec's hub header set, which the git files name and the CDN files do not.
    expect(reg.files!.headerSets).toEqual({ hub: { authorization: `Bearer ${TOKEN}` } });
    expect(reg.files!.files.find((f) => f.path === 'config.json')!.headerSet).toBe('hub');
    expect(reg.files!.files.find((f) => f.path === 'weights/model.safetensors')!.headerSet).toBeUndefined();
    // Every file's task carries the token's tag: a pod without the token names none of them at a node's proxy.
    expect(reg.files!.tag).toBe(hubTokenTag(hub.url, 'org/private', TOKEN));
    const events = await kc.makeApiClient(k8s.CoreV1Api).listNamespacedEvent({ namespace: ns });
    expect(JSON.stringify(events.items)).not.toContain(TOKEN);
  });

  it("preheat.create: the owned ModelPreheat warms the files' URLs at the commit, with the agents' task ids", async () => {
    const [c0] = hub.repos.get('org/tiny')!.commits;
    await create('warm', { repo: 'org/tiny', revision: c0!.sha }, [ENDPOINTS[0]!], {
      preheat: { create: true, scope: 'single_seed_peer' },
    });
    await readyWith('warm', c0!.sha);
    const preheat = await sms.untilState('warm-preheat', 'SUCCESS', { timeoutMs: 60_000, intervalMs: 200 });
    const reg = driver.servers.get(ENDPOINTS[0]!)!.registered.find((r) => r.modelName === 'warm')!;
    const lfs = reg.files!.files.find((f) => f.path === 'weights/model.safetensors')!;
    // The LFS file first, then every git file (a public repository: no token in the job).
    expect(preheat.spec.urls![0]!.split('?')[0]).toBe(lfs.url!.split('?')[0]);
    expect(preheat.spec.urls).toHaveLength(reg.files!.files.length);
    expect(preheat.spec.filteredQueryParams).toEqual(reg.files!.filter);
    expect(preheat.spec.objectStorage).toBeUndefined();
    // Each file's task in status.tasks is the one the agent's download of it names (the same filter).
    const ids = new Map(preheat.status!.tasks!.map((t) => [t.url.split('?')[0], t.taskID]));
    for (const f of reg.files!.files)
      expect(ids.get(f.url!.split('?')[0]), f.path).toBe(
        taskID({ url: f.url!, filter: reg.files!.filter, rule: '1.4' }),
      );
    // The job fetched the LFS object from the CDN (through the seed peer), its signature valid.
    expect(hub.cdnBytes(c0!.files.get('weights/model.safetensors')!.sha256)).toBeGreaterThanOrEqual(
      WEIGHTS.length,
    );
  });

  it("preheat.create of a private repository: the ModelPreheat resolves it pinned at the commit, its job and tasks carry the token's tag", async () => {
    const [c0] = hub.repos.get('org/private')!.commits;
    const jobsBefore = bed.manager.jobs.size;
    await create(
      'warm-private',
      { repo: 'org/private', tokenSecretRef: { name: 'hf', key: 'token' } },
      [ENDPOINTS[1]!],
      { preheat: { create: true, scope: 'single_seed_peer' } },
    );
    await readyWith('warm-private', c0!.sha);
    const preheat = await sms.untilState('warm-private-preheat', 'SUCCESS', {
      timeoutMs: 60_000,
      intervalMs: 200,
    });
    const tag = hubTokenTag(hub.url, 'org/private', TOKEN);
    // The spec names the repository at the commit and the Secret, never the tag nor the token.
    expect(preheat.spec.source?.huggingface).toMatchObject({ repo: 'org/private', revision: c0!.sha });
    expect(preheat.spec.urls).toBeUndefined();
    expect(JSON.stringify(preheat)).not.toContain(tag);
    expect(JSON.stringify(preheat)).not.toContain(TOKEN);
    // The manager's job carries the tag; status.tasks are the ids the agents' downloads name.
    const jobs = [...bed.manager.jobs.values()].slice(jobsBefore).filter((j) => j.type === 'preheat');
    expect(jobs.length).toBeGreaterThan(0);
    for (const j of jobs) expect(j.args['tag']).toBe(tag);
    const reg = driver.servers.get(ENDPOINTS[1]!)!.registered.find((r) => r.modelName === 'warm-private')!;
    expect(reg.files!.tag).toBe(tag);
    const lfs = reg.files!.files.find((f) => f.path === 'weights/model.safetensors')!;
    const ids = new Map(preheat.status!.tasks!.map((t) => [t.url.split('?')[0], t.taskID]));
    expect(ids.get(lfs.url!.split('?')[0])).toBe(
      taskID({ url: lfs.url!, filter: reg.files!.filter, tag, rule: '1.4' }),
    );
  });

  it('an LFS file redirected outside --allowed-hub-redirect-hosts: Stalled HubRedirectNotAllowed naming the file and the flag, no replica told', async () => {
    await create('hostile', { repo: 'org/hostile' }, [ENDPOINTS[0]!]);
    const o = await sms.untilStalled('hostile', { timeoutMs: 60_000, intervalMs: 200 });
    const stalled = condition(o!, 'Stalled')!;
    expect(stalled.reason).toBe('HubRedirectNotAllowed');
    expect(stalled.message).toMatch(
      /^spec\.source\.huggingface\.endpoint: org\/hostile@main: .*the Hub redirects weights\/metadata\.bin to http:\/\/169\.254\.169\.254, which is not in --allowed-hub-redirect-hosts \(http:\/\/127\.0\.0\.1\)/,
    );
    expect(stalled.message).not.toContain('security-credentials');
    for (const server of driver.servers.values())
      expect(server.registered.some((r) => r.modelName === 'hostile')).toBe(false);
  });

  it('a token toward a Hub outside --allowed-hub-hosts: HubNotAllowed, the Secret not read', async () => {
    await sms.createServedModel('elsewhere', {
      modelName: 'elsewhere',
      source: {
        huggingface: {
          repo: 'org/private',
          endpoint: 'http://localhost:9',
          tokenSecretRef: { name: 'hf', key: 'token' },
        },
      },
      modelServer: { endpoints: [ENDPOINTS[0]!], driver: 'directories', agent: AGENT },
    });
    const o = await sms.untilStalled('elsewhere', { timeoutMs: 60_000, intervalMs: 200 });
    expect(condition(o!, 'Stalled')).toMatchObject({
      reason: 'HubNotAllowed',
      message: expect.stringContaining(
        "host localhost:9 is not in the operator's --allowed-hub-hosts (http://127.0.0.1)",
      ),
    });
  });
});
