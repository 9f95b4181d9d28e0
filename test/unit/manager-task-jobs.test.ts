/**
 * The emulator's node-targeted preheats (scope all_peers with ips / count) and task jobs (get_task, delete_task)
 * against the real manager v2.5.1's answers to the same calls, recorded on the real network (a seed peer and two
 * node peers) in test/fixtures/dragonfly/task-jobs-v2.5.1.json: the same create statuses and 422 bodies, the same
 * terminal states, errors and result shapes (null vs [] included), and the same peers where the calls decide them.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { startManagerEmulator, type ManagerEmulator } from '../support/manager-emulator.ts';
import { shapeOf } from '../support/manager-exchanges.ts';

interface Recorded {
  name: string;
  request: { type: string; args?: Record<string, unknown> };
  create: { status: number; body?: unknown };
  job?: { state: string; result: Record<string, unknown> };
}
const fixture = JSON.parse(
  readFileSync(join(import.meta.dirname, '../fixtures/dragonfly/task-jobs-v2.5.1.json'), 'utf8'),
) as { exchanges: Recorded[] };

/** The recording's hosts: the seed peer and the two node peers. */
const SEED = '127.0.0.184';
const NODE_PEERS = [
  { ip: '127.0.0.185', hostname: 'peerload-peer-1' },
  { ip: '127.0.0.186', hostname: 'peerload-peer-2' },
];
/**
 * Not replayed, and why: the 404 needs an origin the emulated node peer fetches from (the emulator's node peers here
 * have no proxy); the deletion lists the host of a proxy download the recording made between the calls.
 */
const NOT_REPLAYED = new Set(['preheat all_peers ips, origin 404']);
/**
 * Compared without one list, and why: between the preheat and the deletion the recording downloaded through both
 * node peers' proxies, so the scheduler held a second peer on one host, whose deletion failed "not found". The
 * replay makes no downloads. The operator reads that answer as a deletion (test/e2e/node-preheat.test.ts meets it).
 */
const UNCOMPARED: Record<string, string> = { delete_task: 'failure_tasks' };

let manager: ManagerEmulator;
let jwt: string;
const answers = new Map<
  string,
  { status: number; body: unknown; job?: { state: string; result: unknown } }
>();

beforeAll(async () => {
  // The recording spaced its calls by the manager's 30 s polling; the replay's come at once.
  manager = await startManagerEmulator({ version: 'v2.5.1', nodePeers: NODE_PEERS, jobRateLimit: 1000 });
  const res = await fetch(`${manager.url}/api/v1/users/signin`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ name: 'root', password: 'dragonfly' }),
  });
  jwt = ((await res.json()) as { token: string }).token;
  for (const e of fixture.exchanges) {
    if (NOT_REPLAYED.has(e.name)) continue;
    const created = await fetch(`${manager.url}/api/v1/jobs`, {
      method: 'POST',
      headers: { authorization: `Bearer ${jwt}`, 'content-type': 'application/json' },
      body: JSON.stringify(e.request).replaceAll('{origin}', 'http://origin.invalid:9'),
    });
    const body = JSON.parse((await created.text()).split('\n')[0]!) as { id?: number };
    if (created.status !== 200) {
      answers.set(e.name, { status: created.status, body });
      continue;
    }
    await manager.waitForJob(body.id!);
    const got = await fetch(`${manager.url}/api/v1/jobs/${body.id}`, {
      headers: { authorization: `Bearer ${jwt}` },
    });
    answers.set(e.name, { status: 200, body, job: (await got.json()) as { state: string; result: unknown } });
  }
});

afterAll(async () => {
  await manager?.close();
});

/** The recorded document with the recording's seed peer as the emulator names it. */
const results = (r: unknown) =>
  (r as { job_states: { results: unknown[] | null; error: string }[] }).job_states[0]!;
const ipsOf = (list: unknown) =>
  ((list as { ip: string }[] | null) ?? []).map((t) => (t.ip === SEED ? 'seed' : t.ip)).sort();
const emulatedIPs = (list: unknown) =>
  ((list as { ip: string; host_type?: string }[] | null) ?? [])
    .map((t) => (t.host_type === 'super' ? 'seed' : t.ip))
    .sort();

describe('node-targeted preheats and task jobs: the emulator answers as manager v2.5.1 did', () => {
  for (const e of fixture.exchanges.filter((x) => !NOT_REPLAYED.has(x.name))) {
    it(e.name, () => {
      const got = answers.get(e.name)!;
      expect(got.status).toBe(e.create.status);
      if (e.create.status !== 200) {
        expect(got.body).toEqual(e.create.body);
        return;
      }
      expect(got.job!.state).toBe(e.job!.state);
      const want = results(e.job!.result);
      const have = results(got.job!.result);
      const without = (r: { results: unknown[] | null }) =>
        UNCOMPARED[e.name]
          ? {
              ...r,
              results: r.results?.map((x) => ({ ...(x as object), [UNCOMPARED[e.name]!]: 'uncompared' })),
            }
          : r;
      expect(shapeOf(without(have))).toEqual(shapeOf(without(want)));
      // Errors name the same things (group and task uuids differ by nature).
      expect(have.error.replace(/(group|task)_[0-9a-f-]{36}/g, '<uuid>')).toBe(
        want.error.replace(/(group|task)_[0-9a-f-]{36}/g, '<uuid>'),
      );
      if (!want.results) return;
      const w = want.results[0] as Record<string, unknown>;
      const h = have.results![0] as Record<string, unknown>;
      if (e.request.type === 'preheat') expect(ipsOf(h['success_tasks'])).toEqual(ipsOf(w['success_tasks']));
      if (e.request.type === 'get_task') expect(emulatedIPs(h['peers'])).toEqual(ipsOf(w['peers']));
    });
  }

  it('delete_task removes the task from every holder: get_task then lists none', () => {
    const deleted = results(answers.get('delete_task')!.job!.result);
    const listed = (deleted.results![0] as { success_tasks: unknown }).success_tasks;
    expect(emulatedIPs(listed)).toEqual(['127.0.0.185', 'seed']);
    const after = results(answers.get('get_task after delete_task')!.job!.result);
    expect((after.results![0] as { peers: unknown[] }).peers).toEqual([]);
  });
});
