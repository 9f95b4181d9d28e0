/**
 * Recorded exchanges with the P2P manager's REST API, and the script of requests that produces them. The same
 * script runs against the real manager (scripts/record-manager-exchanges.ts writes the fixture) and against the
 * emulator (test/unit/manager-replay.test.ts compares): the emulator cannot drift from the real system without a
 * test failing.
 *
 * Values that differ from run to run (ids, times, uuids, addresses, tokens) are not compared; everything else is:
 * the status, the content type, the auth challenge, the exact text of non-JSON bodies, and for JSON bodies their
 * shape (keys, and null vs list vs object vs string vs number at every depth) plus the values that carry meaning
 * (`state`, `message`, `errors`, the job type and args the manager filled in).
 */

export type ExchangeAuth = 'jwt' | 'pat' | 'none' | 'bad-jwt';

export interface ExchangeRequest {
  method: 'GET' | 'POST' | 'PATCH' | 'DELETE';
  /** May contain `{job:<name>}` (the id of the job created by exchange <name>). */
  path: string;
  auth: ExchangeAuth;
  /** Raw body; may contain `{origin}` (the address of the test origin). */
  body?: string;
  /** Poll this GET until the job is SUCCESS or FAILURE and record that answer. */
  untilTerminal?: boolean;
  /** Send this many times at once and record the distinct answers (rate limiting). */
  burst?: number;
}

export interface RecordedResponse {
  status: number;
  contentType: string | undefined;
  wwwAuthenticate: string | undefined;
  hasLink: boolean;
  body: string;
}

export interface Exchange {
  name: string;
  request: ExchangeRequest;
  /** One response, or (burst) the distinct statuses seen with one sample body each. */
  response: RecordedResponse;
  burstStatuses?: number[];
}

export interface ExchangeFixture {
  manager: string;
  client: string;
  recordedAt: string;
  /** Seconds from create to terminal of the successful preheat, as measured (the manager polls its workers). */
  jobSeconds: number;
  exchanges: Exchange[];
}

const file = (url: string, extra: Record<string, unknown> = {}) =>
  JSON.stringify({ type: 'preheat', args: { type: 'file', url, ...extra } });

/** What is asked of the manager, in order. `/model.bin` exists at the origin; `/missing.bin` answers 404. */
export const EXCHANGE_SCRIPT: { name: string; request: ExchangeRequest }[] = [
  {
    name: 'sign-in, wrong password',
    request: {
      method: 'POST',
      path: '/api/v1/users/signin',
      auth: 'none',
      body: '{"name":"root","password":"wrong"}',
    },
  },
  {
    name: 'sign-in, no password',
    request: { method: 'POST', path: '/api/v1/users/signin', auth: 'none', body: '{"name":"root"}' },
  },
  {
    name: 'sign-in',
    request: {
      method: 'POST',
      path: '/api/v1/users/signin',
      auth: 'none',
      body: '{"name":"root","password":"dragonfly"}',
    },
  },
  {
    name: 'create without a token',
    request: { method: 'POST', path: '/api/v1/jobs', auth: 'none', body: file('{origin}/model.bin') },
  },
  {
    name: 'create with an invalid token',
    request: { method: 'POST', path: '/api/v1/jobs', auth: 'bad-jwt', body: file('{origin}/model.bin') },
  },
  {
    name: 'create, body not JSON',
    request: { method: 'POST', path: '/api/v1/jobs', auth: 'jwt', body: '{"type":"preheat"' },
  },
  {
    name: 'create, unknown job type',
    request: { method: 'POST', path: '/api/v1/jobs', auth: 'jwt', body: '{"type":"warmup","args":{}}' },
  },
  {
    name: 'create, no args',
    request: { method: 'POST', path: '/api/v1/jobs', auth: 'jwt', body: '{"type":"preheat"}' },
  },
  {
    name: 'create, no url',
    request: {
      method: 'POST',
      path: '/api/v1/jobs',
      auth: 'jwt',
      body: '{"type":"preheat","args":{"type":"file"}}',
    },
  },
  {
    name: 'create, piece length too small',
    request: {
      method: 'POST',
      path: '/api/v1/jobs',
      auth: 'jwt',
      body: file('{origin}/model.bin', { piece_length: 1024 }),
    },
  },
  {
    name: 'create, unknown scheduler cluster',
    request: {
      method: 'POST',
      path: '/api/v1/jobs',
      auth: 'jwt',
      body: JSON.stringify({
        type: 'preheat',
        args: { type: 'file', url: '{origin}/model.bin' },
        scheduler_cluster_ids: [7],
      }),
    },
  },
  {
    name: 'preheat',
    request: { method: 'POST', path: '/api/v1/jobs', auth: 'jwt', body: file('{origin}/model.bin') },
  },
  { name: 'preheat, pending', request: { method: 'GET', path: '/api/v1/jobs/{job:preheat}', auth: 'jwt' } },
  {
    name: 'preheat, terminal',
    request: { method: 'GET', path: '/api/v1/jobs/{job:preheat}', auth: 'jwt', untilTerminal: true },
  },
  {
    name: 'preheat of a missing object',
    request: { method: 'POST', path: '/api/v1/jobs', auth: 'jwt', body: file('{origin}/missing.bin') },
  },
  {
    name: 'preheat of a missing object, terminal',
    request: {
      method: 'GET',
      path: '/api/v1/jobs/{job:preheat of a missing object}',
      auth: 'jwt',
      untilTerminal: true,
    },
  },
  {
    name: 'preheat with a legacy filter',
    request: {
      method: 'POST',
      path: '/api/v1/jobs',
      auth: 'jwt',
      body: file('{origin}/model.bin?Expires=1&Signature=x', { filter: 'Expires&Signature' }),
    },
  },
  {
    name: 'preheat with the current filter, scope and headers',
    request: {
      method: 'POST',
      path: '/api/v1/jobs',
      auth: 'jwt',
      body: file('{origin}/model.bin?X-Amz-Signature=x', {
        filtered_query_params: 'X-Amz-Signature',
        scope: 'all_seed_peers',
        headers: { 'X-Test': '1' },
        tag: 'peerload',
        application: 'serving',
        piece_length: 4194304,
      }),
    },
  },
  { name: 'get, unknown id', request: { method: 'GET', path: '/api/v1/jobs/999999', auth: 'jwt' } },
  { name: 'get, id not a number', request: { method: 'GET', path: '/api/v1/jobs/abc', auth: 'jwt' } },
  { name: 'list', request: { method: 'GET', path: '/api/v1/jobs?page=1&per_page=2', auth: 'jwt' } },
  { name: 'list, per_page=0', request: { method: 'GET', path: '/api/v1/jobs?per_page=0', auth: 'jwt' } },
  {
    name: 'scheduler cluster 1',
    request: { method: 'GET', path: '/api/v1/scheduler-clusters/1', auth: 'jwt' },
  },
  {
    name: 'scheduler cluster 7',
    request: { method: 'GET', path: '/api/v1/scheduler-clusters/7', auth: 'jwt' },
  },
  {
    name: 'oapi create with a personal access token',
    request: { method: 'POST', path: '/oapi/v1/jobs', auth: 'pat', body: file('{origin}/model.bin') },
  },
  {
    name: 'oapi create without a token',
    request: { method: 'POST', path: '/oapi/v1/jobs', auth: 'none', body: file('{origin}/model.bin') },
  },
  {
    name: 'oapi get',
    request: {
      method: 'GET',
      path: '/oapi/v1/jobs/{job:oapi create with a personal access token}',
      auth: 'pat',
    },
  },
  { name: 'oapi cluster 1', request: { method: 'GET', path: '/oapi/v1/clusters/1', auth: 'pat' } },
  { name: 'oapi cluster 7', request: { method: 'GET', path: '/oapi/v1/clusters/7', auth: 'pat' } },
  {
    name: 'delete',
    request: { method: 'DELETE', path: '/api/v1/jobs/{job:preheat with a legacy filter}', auth: 'jwt' },
  },
  {
    name: 'get after delete',
    request: { method: 'GET', path: '/api/v1/jobs/{job:preheat with a legacy filter}', auth: 'jwt' },
  },
  {
    // The manager rate-limits creates per named scheduler cluster (none named: no limit), 10 per second.
    name: 'create burst',
    request: {
      method: 'POST',
      path: '/api/v1/jobs',
      auth: 'jwt',
      body: JSON.stringify({
        type: 'preheat',
        args: { type: 'file', url: '{origin}/model.bin' },
        scheduler_cluster_ids: [1],
      }),
      burst: 30,
    },
  },
];

/** The structure of a JSON value: keys and kinds at every depth (lists by their first element). */
export function shapeOf(value: unknown): unknown {
  if (value === null) return 'null';
  if (Array.isArray(value)) return value.length === 0 ? [] : [shapeOf(value[0])];
  if (typeof value === 'object') {
    return Object.fromEntries(
      Object.keys(value as object)
        .sort()
        .map((k) => [k, shapeOf((value as Record<string, unknown>)[k])]),
    );
  }
  return typeof value;
}

/** Values that carry meaning, at any depth: compared exactly. */
const MEANINGFUL = new Set([
  'state',
  'message',
  'errors',
  'type',
  'scope',
  'filtered_query_params',
  'task_name',
]);

export function meaningfulValues(
  value: unknown,
  path = '$',
  out: Record<string, unknown> = {},
): Record<string, unknown> {
  if (Array.isArray(value)) value.forEach((v, i) => meaningfulValues(v, `${path}[${i}]`, out));
  else if (value && typeof value === 'object') {
    for (const [k, v] of Object.entries(value)) {
      if (MEANINGFUL.has(k) && (typeof v === 'string' || v === null)) out[`${path}.${k}`] = v;
      meaningfulValues(v, `${path}.${k}`, out);
    }
  }
  return out;
}

/** The body as JSON, or undefined when it is not one JSON document. */
export function parseJSONBody(body: string): unknown {
  try {
    return body === '' ? undefined : (JSON.parse(body) as unknown);
  } catch {
    return undefined;
  }
}

export interface ExchangeTarget {
  baseURL: string;
  /** Signs in (JWT) as the root user. */
  jwt: string;
  /** A personal access token with the job and cluster scopes. */
  pat: string;
  /** The origin serving `/model.bin` (and 404 for anything else). */
  origin: string;
  /** Give up polling a job after this long (default 240 s: the real manager polls its workers every 30 s). */
  terminalTimeoutMs?: number;
  /**
   * How the poll of an `untilTerminal` exchange waits between two gets (default: 500 ms of real time). The replay
   * moves the emulator's clock instead, so 30 s of the manager's polling take no time.
   */
  pause?: () => Promise<void>;
}

async function send(target: ExchangeTarget, req: ExchangeRequest, path: string): Promise<RecordedResponse> {
  const headers: Record<string, string> = {};
  if (req.auth === 'jwt') headers['authorization'] = `Bearer ${target.jwt}`;
  if (req.auth === 'pat') headers['authorization'] = `Bearer ${target.pat}`;
  if (req.auth === 'bad-jwt') headers['authorization'] = 'Bearer not-a-token';
  if (req.body !== undefined) headers['content-type'] = 'application/json';
  const res = await fetch(`${target.baseURL}${path}`, {
    method: req.method,
    headers,
    ...(req.body !== undefined ? { body: req.body.replaceAll('{origin}', target.origin) } : {}),
  });
  return {
    status: res.status,
    contentType: res.headers.get('content-type') ?? undefined,
    wwwAuthenticate: res.headers.get('www-authenticate') ?? undefined,
    hasLink: res.headers.has('link'),
    body: await res.text(),
  };
}

/** Runs {@link EXCHANGE_SCRIPT} against a manager and returns what it answered. */
export async function runExchanges(target: ExchangeTarget): Promise<Exchange[]> {
  const jobs = new Map<string, number>();
  const out: Exchange[] = [];
  for (const { name, request } of EXCHANGE_SCRIPT) {
    const path = request.path.replace(/\{job:([^}]+)\}/g, (_m, ref: string) => {
      const id = jobs.get(ref);
      if (id === undefined)
        throw new Error(`exchange "${name}" refers to job "${ref}", which was not created`);
      return String(id);
    });
    if (request.burst) {
      const all = await Promise.all(Array.from({ length: request.burst }, () => send(target, request, path)));
      const statuses = [...new Set(all.map((r) => r.status))].sort();
      out.push({
        name,
        request,
        response: all.find((r) => r.status !== 200) ?? all[0]!,
        burstStatuses: statuses,
      });
      continue;
    }
    let response = await send(target, request, path);
    if (request.untilTerminal) {
      const deadline = Date.now() + (target.terminalTimeoutMs ?? 240_000);
      while (!/"state":"(SUCCESS|FAILURE)"/.test(response.body) && Date.now() < deadline) {
        await (target.pause?.() ?? new Promise((r) => setTimeout(r, 500)));
        response = await send(target, request, path);
      }
    }
    const json = parseJSONBody(response.body) as { id?: unknown } | undefined;
    if (request.method === 'POST' && response.status === 200 && typeof json?.id === 'number')
      jobs.set(name, json.id);
    out.push({ name, request, response });
  }
  return out;
}
