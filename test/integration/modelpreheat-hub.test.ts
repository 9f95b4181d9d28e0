/**
 * A ModelPreheat of a Hugging Face repository (spec.source.huggingface) against the real apiserver, the Hub emulator
 * and the manager emulator (whose jobs really download through a peer proxy): the revision resolved to a commit
 * (status.source), one job of the files' URLs whose task ids are the ones the peerload agent computes for
 * `peerload fetch hf://` of the same repository, a refresh that follows a moved branch on purpose, a private
 * repository with and without a token, a Hub the token may not go to, and every refusal of the Hub as a condition
 * naming the field; the token never in status, Events, the manager's requests or the operator's log.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import * as k8s from '@kubernetes/client-node';
import { Agent } from 'undici';
import { GROUP, VERSION, conditionOf, peerloadNamespace } from '../support/resources.ts';
import { startHubEmulator, type HubEmulator } from '../support/hub-emulator.ts';
import { hubTree, startHubBed, tinyAndPrivate, type HubBed } from '../support/hub-bed.ts';
import type { ManagerEmulator } from '../support/manager-emulator.ts';
import { capturedLogger, type RunningManager } from '../support/runtime-harness.ts';
import { modelPreheatController } from '../../src/controllers/modelpreheat/index.ts';
import { newProgress } from '../../src/place/placer.ts';
import { HubClient } from '../../src/huggingface/client.ts';
import { hubEndpoint } from '../../src/huggingface/endpoint.ts';
import { listRepoFiles } from '../../src/huggingface/files.ts';
import { lfsLocations } from '../../src/huggingface/locations.ts';
import { parseHostRules } from '../../src/policy/reach.ts';
import { hubVersionSpec } from '../../src/huggingface/version-spec.ts';
import { hubTokenTag } from '../../src/storage/credential-tag.ts';

/** The emulator's CDN listens on loopback, as an admin would list a mirror's CDN. */
const LOOPBACK_REDIRECTS = {
  hosts: parseHostRules('http://127.0.0.1'),
  flag: '--allowed-hub-redirect-hosts',
};

const TOKEN = 'hf_modelPreheatHubToken0123456789abcd';
const WEIGHTS = Buffer.alloc(5 * 1024 * 1024 + 29, 7);
const TREE = hubTree(WEIGHTS);

let bed: HubBed;
let kc: k8s.KubeConfig;
let custom: k8s.CustomObjectsApi;
let ns: string;
let hub: HubEmulator;
let operator: RunningManager;
let manager: ManagerEmulator;
const logs = capturedLogger();
const dispatcher = new Agent();

beforeAll(async () => {
  bed = await startHubBed({
    namespace: 'mph-hub',
    hub: {
      repos: [...tinyAndPrivate(WEIGHTS), { id: 'org/gated', commits: [TREE], gated: true }],
      tokens: { [TOKEN]: ['org/private'] },
    },
    token: TOKEN,
    controllers: [modelPreheatController],
    logger: logs.logger,
  });
  ({ kc, custom, ns, hub, operator, manager } = bed);
}, 180_000);

afterAll(async () => {
  await bed?.close();
  await dispatcher.close();
});

const api = { group: GROUP, version: VERSION, plural: 'modelpreheats' };
const get = (name: string) => peerloadNamespace(kc, ns).getModelPreheat(name);
const create = (name: string, huggingface: Record<string, unknown>) =>
  peerloadNamespace(kc, ns).createModelPreheat(name, {
    source: { huggingface: { endpoint: hub.url, ...huggingface } },
  });
const condition = conditionOf;

const readyAt = (name: string, commit: string) =>
  peerloadNamespace(kc, ns).untilModelPreheat(
    name,
    `Ready at ${commit.slice(0, 7)}`,
    (o) => condition(o, 'Ready')?.status === 'True' && o.status?.source?.huggingface?.commit === commit,
    { timeoutMs: 60_000 },
  );

const stalled = (name: string) =>
  peerloadNamespace(kc, ns).untilModelPreheat(
    name,
    'Stalled',
    (o) => condition(o, 'Stalled')?.status === 'True',
    { timeoutMs: 60_000 },
  );

/** Each file's task id as `peerload fetch hf://REPO` computes it: its listing, its version spec, the agent's ids. */
async function fetchTaskIDs(repo: string, selection: { exclude?: string[] }, token?: string) {
  const endpoint = hubEndpoint(hub.url, 'http://127.0.0.1');
  const client = new HubClient({ endpoint, dispatcher, token });
  const listing = await listRepoFiles(client, repo, 'main', selection);
  const spec = hubVersionSpec(endpoint, listing, await lfsLocations(client, listing, LOOPBACK_REDIRECTS), {
    headers: client.authHeaders(),
    // With a token, the token's tag (what the CLI derives too): the private files' tasks are named by holders only.
    tag: token !== undefined ? hubTokenTag(hub.url, repo, token) : undefined,
  });
  const progress = newProgress(repo, spec, '1.4');
  return new Map(progress.files.map((f) => [f.path, f.expectedTaskID!]));
}

describe('a ModelPreheat of a Hugging Face repository', () => {
  it("is Ready with the commit in status, one job whose task ids are peerload fetch hf://'s", async () => {
    const [c0] = hub.repos.get('org/tiny')!.commits;
    const jobsBefore = manager.jobs.size;
    await create('tiny', { repo: 'org/tiny', exclude: ['.gitattributes'] });
    const o = (await readyAt('tiny', c0!.sha))!;
    expect(o.status!.source).toEqual({
      huggingface: { repo: 'org/tiny', revision: 'main', commit: c0!.sha },
      observedGeneration: o.metadata.generation,
      files: 3,
      bytes: WEIGHTS.length + 21 + 5,
      preheated: 3,
    });
    expect(manager.jobs.size - jobsBefore).toBe(1);
    const ids = await fetchTaskIDs('org/tiny', { exclude: ['.gitattributes'] });
    expect([...ids.values()].sort()).toEqual(o.status!.tasks!.map((t) => t.taskID).sort());
    // The LFS file at its CDN URL (signature redacted in status), the git files at their resolve URLs at the commit.
    const weights = o.status!.tasks!.find((t) => t.taskID === ids.get('weights/model.safetensors'))!;
    expect(weights.url.startsWith(`${hub.cdnURL}/repos/`)).toBe(true);
    expect(o.status!.tasks!.map((t) => t.url)).toContain(
      `${hub.url}/org/tiny/resolve/${c0!.sha}/config.json`,
    );
    // The seed peer fetched the LFS object from the CDN: the job's signed URL was valid.
    expect(hub.cdnBytes(c0!.files.get('weights/model.safetensors')!.sha256)).toBeGreaterThanOrEqual(
      WEIGHTS.length,
    );
  });

  it('follows a moved branch only when the refresh annotation takes a new value', async () => {
    const [c0, c1] = hub.repos.get('org/tiny')!.commits;
    hub.setRef('org/tiny', 'main', 1);
    const jobsBefore = manager.jobs.size;
    await new Promise((r) => setTimeout(r, 1500));
    expect((await get('tiny')).status!.source!.huggingface!.commit).toBe(c0!.sha);
    expect(manager.jobs.size).toBe(jobsBefore);
    await custom.patchNamespacedCustomObject(
      {
        ...api,
        namespace: ns,
        name: 'tiny',
        body: { metadata: { annotations: { 'peerload.io/refresh-source': 'a' } } },
      },
      k8s.setHeaderOptions('Content-Type', k8s.PatchStrategy.MergePatch),
    );
    const o = (await readyAt('tiny', c1!.sha))!;
    expect(o.status!.source!.refresh).toBe('a');
    expect(manager.jobs.size - jobsBefore).toBe(1);
    const config = o.status!.tasks!.find((t) => t.url.endsWith('/config.json'))!;
    expect(config.url).toBe(`${hub.url}/org/tiny/resolve/${c1!.sha}/config.json`);
    hub.setRef('org/tiny', 'main', 0);
  });

  it('a private repository: Stalled without a token naming the field, Ready with one (its LFS files only)', async () => {
    await create('private-none', { repo: 'org/private' });
    const refused = (await stalled('private-none'))!;
    expect(condition(refused, 'Stalled')).toMatchObject({
      reason: 'HubTokenRequired',
      message: expect.stringMatching(
        /^spec\.source\.huggingface\.tokenSecretRef: org\/private@main: .*private or does not exist/,
      ),
    });
    expect(condition(refused, 'Ready')?.status).toBe('False');

    const [c0] = hub.repos.get('org/private')!.commits;
    const jobsBefore = manager.jobs.size;
    await create('private-token', { repo: 'org/private', tokenSecretRef: { name: 'hf', key: 'token' } });
    const o = (await readyAt('private-token', c0!.sha))!;
    expect(manager.jobs.size - jobsBefore).toBe(1);
    // The git files need the token, which never goes to the manager: the job holds the LFS file alone.
    expect(o.status!.source).toMatchObject({ files: 4, preheated: 1 });
    const ids = await fetchTaskIDs('org/private', {}, TOKEN);
    expect(o.status!.tasks!.map((t) => t.taskID)).toEqual([ids.get('weights/model.safetensors')]);
    // The job carries the token's tag (only holders of the token name its task); the ModelPreheat shows none.
    const tag = hubTokenTag(hub.url, 'org/private', TOKEN);
    expect([...manager.jobs.values()].at(-1)!.args['tag']).toBe(tag);
    expect(JSON.stringify(o)).not.toContain(tag);
  });

  it('a token toward a Hub outside --allowed-hub-hosts: HubNotAllowed, the Secret not read', async () => {
    await create('elsewhere', {
      repo: 'org/private',
      endpoint: 'http://localhost:9',
      tokenSecretRef: { name: 'hf-elsewhere', key: 'token' },
    });
    const o = (await stalled('elsewhere'))!;
    expect(condition(o, 'Stalled')).toMatchObject({
      reason: 'HubNotAllowed',
      message: expect.stringContaining(
        "spec.source.huggingface.endpoint: host localhost:9 is not in the operator's --allowed-hub-hosts (http://127.0.0.1)",
      ),
    });
    expect(operator.requests.filter((r) => r.path.includes('/secrets/hf-elsewhere'))).toEqual([]);
    // Whereas the allowed Hub's token was read (private-token above): the record would show the read.
    expect(operator.requests.some((r) => r.path.endsWith(`/namespaces/${ns}/secrets/hf`))).toBe(true);
  });

  it.each([
    [
      'no-repo',
      { repo: 'org/missing', tokenSecretRef: { name: 'hf', key: 'token' } },
      'HubRepoNotFound',
      'repo',
    ],
    [
      'gated',
      { repo: 'org/gated', tokenSecretRef: { name: 'hf', key: 'token' } },
      'HubForbidden',
      'tokenSecretRef',
    ],
    ['no-revision', { repo: 'org/tiny', revision: 'nope' }, 'HubRevisionNotFound', 'revision'],
    ['no-files', { repo: 'org/tiny', include: ['*.bin'] }, 'HubNoFiles', 'include'],
    ['too-many', { repo: 'org/tiny', maxFiles: 2 }, 'HubTooLarge', 'maxFiles'],
    ['too-big', { repo: 'org/tiny', maxBytes: 1024 }, 'HubTooLarge', 'maxBytes'],
  ])('%s: Stalled, final, naming the field', async (name, huggingface, reason, field) => {
    const jobsBefore = manager.jobs.size;
    await create(name, huggingface);
    const o = (await stalled(name))!;
    expect(condition(o, 'Stalled')).toMatchObject({
      reason,
      message: expect.stringMatching(new RegExp(`^spec\\.source\\.huggingface\\.${field}: `)),
    });
    expect(condition(o, 'Succeeded')?.status).toBe('False');
    expect(o.status!.phase).toBe('BLOCKED');
    expect(manager.jobs.size).toBe(jobsBefore);
  });

  it('a Hub that does not answer: Stalled and tried again, not final', async () => {
    const closed = await startHubEmulator({ repos: [] });
    const url = closed.url;
    await closed.close();
    await create('unreachable', { repo: 'org/tiny', endpoint: url });
    const o = (await stalled('unreachable'))!;
    expect(condition(o, 'Stalled')).toMatchObject({
      reason: 'HubUnavailable',
      message: expect.stringMatching(/^spec\.source\.huggingface\.repo: org\/tiny@main: /),
    });
    expect(condition(o, 'Succeeded')?.status).toBe('Unknown');
  });

  it('never shows the token: status, Events, the manager requests, the operator log', async () => {
    const all = await custom.listNamespacedCustomObject({ ...api, namespace: ns });
    expect(JSON.stringify(all)).not.toContain(TOKEN);
    const events = await kc.makeApiClient(k8s.CoreV1Api).listNamespacedEvent({ namespace: ns });
    expect(events.items.length).toBeGreaterThan(0);
    expect(JSON.stringify(events.items)).not.toContain(TOKEN);
    expect(manager.log.length).toBeGreaterThan(0);
    expect(JSON.stringify(manager.log)).not.toContain(TOKEN);
    expect(logs.text()).toContain('"level":"debug"');
    expect(logs.text()).not.toContain(TOKEN);
    // The token did reach the Hub (the private repository listed and located with it).
    expect(hub.hubRequests.some((r) => r.authorized && r.url.includes('org/private'))).toBe(true);
  });
});
