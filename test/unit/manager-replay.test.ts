/**
 * The manager emulator's `version: 'v2.5.1'` profile replayed against the real manager's recorded answers
 * (test/fixtures/dragonfly/manager-v2.5.1.json, written by scripts/record-manager-exchanges.ts from the request
 * script in test/support/manager-exchanges.ts). Every recorded exchange is one test: the emulator must answer the
 * same status, content type, challenge and Link header presence; the same text when the body is not one JSON
 * document; and for JSON the same shape (keys and kinds at every depth, null vs [] included), the same meaningful
 * values, and then the same document once the values that differ by nature are normalised (see `normalise`).
 *
 * Time is the emulator's injected clock: the real manager showed each preheat PENDING until its poll 30 s after the
 * create; here those 30 s pass by moving the clock while `runExchanges` polls, so the replay is deterministic and
 * takes about a second.
 */
import { readFileSync } from 'node:fs';
import { resolve } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { JobSchema, jobPeerTasks, normaliseJob } from '../../src/manager/types.ts';
import { startManagerEmulator, type ManagerEmulator } from '../support/manager-emulator.ts';
import {
  EXCHANGE_SCRIPT,
  meaningfulValues,
  parseJSONBody,
  runExchanges,
  shapeOf,
  type Exchange,
  type ExchangeFixture,
  type RecordedResponse,
} from '../support/manager-exchanges.ts';
import { startOrigin, type Origin } from '../support/origin.ts';
import { startPeerProxy, type PeerProxy } from '../support/peer-proxy.ts';

const FIXTURE = JSON.parse(
  readFileSync(resolve(import.meta.dirname, '../fixtures/dragonfly/manager-v2.5.1.json'), 'utf8'),
) as ExchangeFixture;

/** The real manager re-polls a new job's task group 30 s after the create (`pollingJob`, backoff from 30 s). */
const FIRST_REPOLL_MS = 30_000;
/** The recording began at this time; any fixed instant keeps the emulator's times reproducible. */
const CLOCK_START = Date.parse('2026-11-24T01:39:00.123Z');
const PAT = 'replay-personal-access-token';
/** The harness's probe preheats (test/support/dragonfly.ts) left jobs 1 and 2 before the script ran. */
const PROBE_URL = /http:\/\/127\.0\.0\.1:\d+\/probe\.bin/g;
const NO_SEED_PEER = 'cluster 1 scheduler 127.0.0.1 no available seed peer';

const UUID = /[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}/g;
const RFC3339 = /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(?:\.(\d+))?Z$/;
const ZERO_TIME = '0001-01-01T00:00:00Z';

/**
 * What differs between two runs by nature, replaced by a placeholder in both documents before they are compared;
 * everything else must be equal:
 * - job ids (`id` of an object with a `task_id`): the database's sequence. Cluster and user ids are kept.
 * - times: `<time>` for database times (up to 3 fraction digits, as MySQL keeps them) and `<time ns>` for Go clock
 *   times (4 to 9 digits, as in a job's `result`), so the precision of each time is still compared; the zero time
 *   is kept.
 * - uuids (`group_<uuid>`, `task_<uuid>`).
 * - the address and name of the peer in `success_tasks`/`failure_tasks` (the real seed peer vs the emulated one).
 * Done on the text before parsing: the origin's address becomes `{origin}` and the harness's probe origin
 * `{probe}`, and JWTs `<token>` (the recorder wrote the fixture so).
 */
function normalise(value: unknown, key = ''): unknown {
  if (typeof value === 'string') {
    const t = RFC3339.exec(value);
    if (t && value !== ZERO_TIME) return (t[1]?.length ?? 0) > 3 ? '<time ns>' : '<time>';
    return value.replace(UUID, '<uuid>');
  }
  if (Array.isArray(value)) {
    const peerList = key === 'success_tasks' || key === 'failure_tasks';
    return value.map((v) =>
      peerList && v && typeof v === 'object'
        ? { ...normalisedObject(v), hostname: '<peer>', ip: '<peer>' }
        : normalise(v),
    );
  }
  if (value && typeof value === 'object') return normalisedObject(value);
  return value;
}

function normalisedObject(value: object): Record<string, unknown> {
  const out: Record<string, unknown> = {};
  for (const [k, v] of Object.entries(value)) out[k] = normalise(v, k);
  if ('task_id' in value && 'id' in value) out['id'] = '<job id>';
  return out;
}

function normaliseText(body: string, originURL?: string): string {
  let text = body.replace(PROBE_URL, '{probe}');
  if (originURL) text = text.replaceAll(originURL, '{origin}');
  return text.replace(/"token":"[^"]+"/g, '"token":"<token>"');
}

let origin: Origin;
let peer: PeerProxy;
let manager: ManagerEmulator;
let clock = CLOCK_START;
let replayed: Exchange[] = [];
let replayMs = 0;

/** Moves the emulator's clock and lets the jobs whose time has come run. */
async function advance(ms: number): Promise<void> {
  clock += ms;
  manager.tick();
  // Real I/O (the emulated seed peer fetching from the origin) needs real time, however short.
  await new Promise((r) => setTimeout(r, 2));
}

async function signIn(): Promise<string> {
  const res = await fetch(`${manager.url}/api/v1/users/signin`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ name: 'root', password: 'dragonfly' }),
  });
  expect(res.status).toBe(200);
  return ((await res.json()) as { token: string }).token;
}

/** Jobs 1 and 2 of the recording: the harness's probes, FAILURE before the seed peer was known, then SUCCESS. */
async function replayProbes(jwt: string): Promise<void> {
  manager.injectJobFailures(1, NO_SEED_PEER);
  for (let i = 0; i < 2; i++) {
    const res = await fetch(`${manager.url}/api/v1/jobs`, {
      method: 'POST',
      headers: { authorization: `Bearer ${jwt}`, 'content-type': 'application/json' },
      body: JSON.stringify({ type: 'preheat', args: { type: 'file', url: `${origin.url}/probe.bin` } }),
    });
    const { id } = (await res.json()) as { id: number };
    await advance(FIRST_REPOLL_MS);
    await manager.waitForJob(id);
  }
}

beforeAll(async () => {
  origin = await startOrigin({
    '/model.bin': Buffer.alloc(1 << 20, 7),
    '/probe.bin': Buffer.alloc(4096, 1),
  });
  peer = await startPeerProxy();
  manager = await startManagerEmulator({
    version: 'v2.5.1',
    peer,
    tokens: [{ token: PAT, scopes: ['job', 'cluster'] }],
    now: () => clock,
    jobClock: 'now',
    jobLatencyMs: FIRST_REPOLL_MS,
  });
  const started = Date.now();
  const jwt = await signIn();
  await replayProbes(jwt);
  replayed = await runExchanges({
    baseURL: manager.url,
    jwt,
    pat: PAT,
    origin: origin.url,
    pause: () => advance(500),
    terminalTimeoutMs: 10_000,
  });
  replayMs = Date.now() - started;
});

afterAll(async () => {
  await manager?.close();
  await peer?.close();
  await origin?.close();
});

describe(`manager emulator (v2.5.1 profile) replays the real manager ${FIXTURE.manager}`, () => {
  it('the fixture was recorded from the current request script (else re-record it)', () => {
    expect(FIXTURE.manager).toBe('v2.5.1');
    expect(FIXTURE.exchanges.map((e) => ({ name: e.name, request: e.request }))).toEqual(EXCHANGE_SCRIPT);
    expect(replayed.map((e) => e.name)).toEqual(FIXTURE.exchanges.map((e) => e.name));
  });

  it('the whole replay is quick: the 30 s polls pass on the injected clock', () => {
    // On real time the two terminal polls alone would take 60 s; measured here: 1.2-2.4 s on a busy 2-core
    // machine. The bound leaves room for a slower machine without letting real-time polling back in.
    expect(replayMs).toBeLessThan(20_000);
  });

  it.each(FIXTURE.exchanges.map((e, i) => [e.name, i] as const))('%s', (_name, i) => {
    const want = FIXTURE.exchanges[i]!;
    const got = replayed[i]!;
    const head = (r: RecordedResponse) => ({
      status: r.status,
      contentType: r.contentType,
      wwwAuthenticate: r.wwwAuthenticate,
      hasLink: r.hasLink,
    });
    expect(head(got.response)).toEqual(head(want.response));
    expect(got.burstStatuses).toEqual(want.burstStatuses);

    const wantText = normaliseText(want.response.body);
    const gotText = normaliseText(got.response.body, origin.url);
    const wantJSON = parseJSONBody(wantText);
    if (wantJSON === undefined) {
      // Empty, text/plain, or two JSON objects back to back: the exact text.
      expect(gotText).toBe(wantText);
      return;
    }
    const gotJSON = parseJSONBody(gotText);
    expect(shapeOf(gotJSON), 'JSON shape (keys, null vs [] vs object)').toEqual(shapeOf(wantJSON));
    expect(meaningfulValues(gotJSON), 'meaningful values').toEqual(meaningfulValues(wantJSON));
    expect(normalise(gotJSON), 'the whole document, normalised').toEqual(normalise(wantJSON));
  });
});

describe(`the manager client reads every job the real manager ${FIXTURE.manager} answered`, () => {
  const jobDocuments = FIXTURE.exchanges.flatMap((e) => {
    const body = parseJSONBody(e.response.body);
    const docs = Array.isArray(body) ? body : [body];
    return docs
      .filter((d): d is Record<string, unknown> => !!d && typeof d === 'object' && 'task_id' in d)
      .map((d, i) => [`${e.name} #${i}`, d] as const);
  });

  it('the fixture has job documents of every kind (create, get, list; PENDING, SUCCESS, FAILURE)', () => {
    expect(jobDocuments.length).toBeGreaterThanOrEqual(10);
    expect(new Set(jobDocuments.map(([, d]) => d['state']))).toEqual(
      new Set(['PENDING', 'SUCCESS', 'FAILURE']),
    );
  });

  it.each(jobDocuments)('%s', (_name, doc) => {
    const job = normaliseJob(JobSchema.parse(doc));
    expect(job.state).toBe(doc['state']);
    expect(job.groupID).toMatch(/^group_/);
    // Null peer lists (PENDING, or the SUCCESS of an origin 404) read as no peers, never as an error.
    const peers = jobPeerTasks(job);
    const result = doc['result'] as { job_states?: { results: unknown }[] } | null;
    const successTasks = (result?.job_states ?? []).flatMap((s) =>
      ((s.results ?? []) as { success_tasks: unknown[] | null }[]).flatMap((r) => r.success_tasks ?? []),
    );
    expect(peers.success).toHaveLength(successTasks.length);
  });
});
