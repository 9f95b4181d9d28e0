/**
 * How the manager emulator binds and checks a job request, as the real manager does: gin's binding of
 * `types.CreateJobRequest` and of each job type's args (422 with Go's texts), the defaults the service fills in,
 * and the service's own checks (500 `invalid params: ...`). The contract's profile and the real v2.5.1 one differ
 * where the comments say.
 */
import { RAW_DEFAULT_FILTERED_QUERY_PARAMS, taskID as computeTaskID } from '../../src/storage/taskid.ts';
import { HttpError, goJSONError, isObj, typeError, validation } from './manager-emulator-http.ts';
import { sortedKeys } from './manager-json.ts';

export const DEFAULT_TIMEOUT_NS = 3_600_000_000_000;
/** An image preheat's manifest URL: scheme, registry, repository, reference. */
export const IMAGE_URL = /^(.*):\/\/(.*)\/v2\/(.*)\/manifests\/(.*)$/;
const KNOWN_OTHER_TYPES = new Set(['sync_peers', 'get_image_distribution']);

/** Binds and checks one job type's args. */
export interface JobKind {
  bind(raw: unknown): Record<string, unknown>;
  check(args: Record<string, unknown>): void;
}

export interface JobBinding {
  /** A request body as JSON, or 422 with the manager's text. */
  parseJSON(text: string): unknown;
  /** `types.CreateJobRequest` bound (422 on a field of the wrong type or a missing type). */
  bindCreateJob(bodyText: string): Record<string, unknown>;
  /** How a job type is bound: undefined for a type the manager does not know. */
  jobKind(type: string): JobKind | undefined;
  /** The task a get_task / delete_task job is about. */
  taskOf(args: Record<string, unknown>): string;
}

/** `real`: the v2.5.1 profile (else the contract's); `argsDialect`: how the stored args name the filter. */
export function jobBinding(real: boolean, argsDialect: 'current' | 'legacy'): JobBinding {
  function parseJSON(text: string): unknown {
    try {
      return JSON.parse(text);
    } catch (e) {
      throw new HttpError(422, {
        errors: real ? goJSONError(text, e) : e instanceof Error ? e.message : 'invalid JSON',
      });
    }
  }

  function optString(args: Record<string, unknown>, key: string, field: string): string {
    const v = args[key];
    if (v === undefined || v === null) return '';
    if (typeof v !== 'string') throw typeError(field, 'string', v);
    return v;
  }

  function optInt(
    args: Record<string, unknown>,
    key: string,
    field: string,
    goType: string,
  ): number | undefined {
    const v = args[key];
    if (v === undefined || v === null) return undefined;
    if (typeof v !== 'number' || !Number.isInteger(v)) throw typeError(field, goType, v);
    return v;
  }

  /** gin's validator text for a tag of a preheat argument (struct path per manager version). */
  const argValidation = (field: string, tag: string) =>
    real
      ? validation('CreatePreheatJobRequest.Args', field, tag)
      : validation('PreheatArgs', field, field === 'IPs' ? 'max' : tag);

  /** Go's zero value test (`omitempty` on a struct skips validating a zero struct: all fields absent or zero). */
  const isZeroArgs = (raw: unknown): boolean =>
    !isObj(raw) || Object.values(raw).every((v) => v === null || v === '' || v === 0 || v === false);

  /**
   * Binds preheat args the way the manager's binding does (422), with the service's defaults filled in. The
   * checks of the service (500 `invalid params: ...`) come later, in {@link checkPreheatArgs}, after the scheduler
   * clusters are chosen, as in the manager.
   */
  function bindPreheatArgs(raw: unknown): Record<string, unknown> {
    if (real && isZeroArgs(raw)) return { type: '' };
    if (!isObj(raw)) throw validation('CreatePreheatJobRequest', 'Args', 'required');
    const type = optString(raw, 'type', 'CreatePreheatJobRequest.args.type');
    if (type === '') throw argValidation('Type', 'required');
    if (type !== 'image' && type !== 'file') throw argValidation('Type', 'oneof');
    const url = optString(raw, 'url', 'CreatePreheatJobRequest.args.url');
    let urls: string[] | null = null;
    if (raw['urls'] !== undefined && raw['urls'] !== null) {
      if (!Array.isArray(raw['urls']) || raw['urls'].some((u) => typeof u !== 'string')) {
        throw typeError('CreatePreheatJobRequest.args.urls', '[]string', raw['urls']);
      }
      urls = raw['urls'] as string[];
    }
    // The contract accepts all three dialects (the newest wins); the real v2.5.1 binds only
    // `filtered_query_params` and applies its default list when a legacy `filter` is all there is.
    let filter = '';
    for (const key of real
      ? ['filtered_query_params']
      : ['filter', 'filteredQueryParams', 'filtered_query_params']) {
      const v = optString(raw, key, `CreatePreheatJobRequest.args.${key}`);
      if (v !== '') filter = v;
    }
    let headers: Record<string, string> | null = null;
    if (raw['headers'] !== undefined && raw['headers'] !== null) {
      if (!isObj(raw['headers']) || Object.values(raw['headers']).some((v) => typeof v !== 'string')) {
        throw typeError('CreatePreheatJobRequest.args.headers', 'map[string]string', raw['headers']);
      }
      headers = raw['headers'] as Record<string, string>;
    }
    const scope = optString(raw, 'scope', 'CreatePreheatJobRequest.args.scope') || 'single_seed_peer';
    if (!['single_seed_peer', 'all_seed_peers', 'all_peers'].includes(scope)) {
      throw argValidation('Scope', 'oneof');
    }
    let ips: string[] | null = null;
    if (raw['ips'] !== undefined && raw['ips'] !== null) {
      if (!Array.isArray(raw['ips']))
        throw typeError('CreatePreheatJobRequest.args.ips', '[]string', raw['ips']);
      if (raw['ips'].length > 100) throw argValidation('IPs', 'lte');
      // `omitempty` skips an empty list in the real manager; the contract refuses it.
      if (raw['ips'].length < 1 && !real) throw argValidation('IPs', 'gte');
      ips = raw['ips'] as string[];
    }
    const count = optInt(raw, 'count', 'CreatePreheatJobRequest.args.count', 'uint32');
    if (count !== undefined && (count < 1 || count > 200))
      throw argValidation('Count', count < 1 ? 'gte' : 'lte');
    const percentage = optInt(raw, 'percentage', 'CreatePreheatJobRequest.args.percentage', 'uint8');
    if (percentage !== undefined && (percentage < 1 || percentage > 100)) {
      throw argValidation('Percentage', percentage < 1 ? 'gte' : 'lte');
    }
    const pieceLength = optInt(raw, 'piece_length', 'CreatePreheatJobRequest.args.piece_length', 'uint64');
    if (pieceLength !== undefined && (pieceLength < 4194304 || pieceLength > 67108864)) {
      throw argValidation('PieceLength', pieceLength < 4194304 ? 'gte' : 'lte');
    }
    const timeout = optInt(raw, 'timeout', 'CreatePreheatJobRequest.args.timeout', 'time.Duration');
    const concurrentTaskCount = optInt(
      raw,
      'concurrent_task_count',
      'CreatePreheatJobRequest.args.concurrent_task_count',
      'int64',
    );
    const concurrentPeerCount = optInt(
      raw,
      'concurrent_peer_count',
      'CreatePreheatJobRequest.args.concurrent_peer_count',
      'int64',
    );
    const platform = optString(raw, 'platform', 'CreatePreheatJobRequest.args.platform');

    const args: Record<string, unknown> = {
      type,
      url,
      urls,
      piece_length: pieceLength ?? null,
      tag: optString(raw, 'tag', 'CreatePreheatJobRequest.args.tag'),
      application: optString(raw, 'application', 'CreatePreheatJobRequest.args.application'),
    };
    if (argsDialect === 'legacy') args['filter'] = filter;
    else args['filtered_query_params'] = filter || RAW_DEFAULT_FILTERED_QUERY_PARAMS;
    Object.assign(args, {
      headers,
      username: optString(raw, 'username', 'CreatePreheatJobRequest.args.username'),
      password: optString(raw, 'password', 'CreatePreheatJobRequest.args.password'),
      platform,
      scope,
      ips,
      count: count ?? null,
      percentage: percentage ?? null,
      concurrent_task_count: concurrentTaskCount || 8,
      concurrent_peer_count: concurrentPeerCount || 500,
      timeout: timeout || DEFAULT_TIMEOUT_NS,
    });
    if (!real) return args;
    // The manager stores the args struct as a map: every field, keys sorted, the storage back ends null.
    return sortedKeys({
      ...args,
      object_storage: isObj(raw['object_storage']) ? raw['object_storage'] : null,
      hdfs: isObj(raw['hdfs']) ? raw['hdfs'] : null,
    });
  }

  /** The preheat service's checks of bound args (500 `invalid params: ...`, `unknown preheat type`). */
  function checkPreheatArgs(args: Record<string, unknown>): void {
    const url = args['url'] as string;
    const urls = args['urls'] as string[] | null;
    if (args['type'] === 'image') {
      if (url === '') throw new HttpError(500, { message: 'invalid params: url is required' });
      if (!real && urls !== null && urls.length > 0)
        throw new HttpError(500, { message: 'invalid params: urls is only supported for file type' });
      if (!IMAGE_URL.test(url))
        throw new HttpError(500, { message: `invalid params: invalid image url ${url}` });
    } else if (args['type'] === 'file') {
      if (url === '' && (urls === null || urls.length === 0)) {
        const message = real ? 'invalid params: url or urls is required' : 'invalid params: url is required';
        throw new HttpError(500, { message });
      }
    } else {
      throw new HttpError(500, { message: 'unknown preheat type' });
    }
  }

  /**
   * Binds `types.CreateJobRequest` (422): the real manager's rate limiter (v2.5.1) does it before the handler
   * does it again, so a failure there is answered twice (see {@link realRateLimiter}).
   */
  function bindCreateJob(bodyText: string): Record<string, unknown> {
    const body = parseJSON(bodyText);
    if (!isObj(body))
      throw new HttpError(422, {
        errors: 'json: cannot unmarshal into Go value of type types.CreateJobRequest',
      });
    if (body['bio'] !== undefined && body['bio'] !== null && typeof body['bio'] !== 'string')
      throw typeError('CreateJobRequest.bio', 'string', body['bio']);
    if (
      body['user_id'] !== undefined &&
      body['user_id'] !== null &&
      (typeof body['user_id'] !== 'number' || !Number.isInteger(body['user_id']))
    ) {
      throw typeError('CreateJobRequest.user_id', 'uint', body['user_id']);
    }
    const raw = body['scheduler_cluster_ids'];
    if (
      raw !== undefined &&
      raw !== null &&
      (!Array.isArray(raw) || raw.some((x) => typeof x !== 'number' || !Number.isInteger(x) || x < 0))
    ) {
      throw typeError('CreateJobRequest.scheduler_cluster_ids', '[]uint', raw);
    }
    if (typeof body['type'] !== 'string' || body['type'] === '')
      throw validation('CreateJobRequest', 'Type', 'required');
    return body;
  }

  /**
   * How each job type is created: its args bound and checked. A type the manager knows but the emulator does not
   * run is stored with its args as given.
   */
  const JOB_TYPES: Record<string, JobKind> = {
    preheat: { bind: bindPreheatArgs, check: checkPreheatArgs },
    get_task: { bind: bindTaskArgs, check: checkTaskArgs },
    delete_task: { bind: bindTaskArgs, check: checkTaskArgs },
  };

  /** get_task / delete_task args (manager v2.5.1 types.GetTaskArgs, DeleteTaskArgs). */
  function bindTaskArgs(raw: unknown): Record<string, unknown> {
    const a = isObj(raw) ? raw : {};
    const str = (k: string) => (typeof a[k] === 'string' ? (a[k] as string) : '');
    return {
      task_id: str('task_id'),
      url: str('url'),
      tag: str('tag'),
      application: str('application'),
      filtered_query_params: str('filtered_query_params') || RAW_DEFAULT_FILTERED_QUERY_PARAMS,
      piece_length: typeof a['piece_length'] === 'number' ? a['piece_length'] : null,
      content_for_calculating_task_id: null,
      timeout: typeof a['timeout'] === 'number' && a['timeout'] > 0 ? a['timeout'] : DEFAULT_TIMEOUT_NS,
    };
  }

  function checkTaskArgs(args: Record<string, unknown>): void {
    // As manager v2.5.1 answers a get_task or delete_task without any of them (recorded 2026-11-24).
    if (!args['task_id'] && !args['url'])
      throw new HttpError(422, {
        errors: 'invalid params: task_id, content_for_calculating_task_id or url is required',
      });
  }

  /** The task a get_task / delete_task job is about: its id, or the id of its URL (the manager's Go rule). */
  function taskOf(args: Record<string, unknown>): string {
    if (args['task_id']) return args['task_id'] as string;
    const filter = String(args['filtered_query_params'] || RAW_DEFAULT_FILTERED_QUERY_PARAMS)
      .split('&')
      .filter((x) => x !== '');
    return computeTaskID({
      url: args['url'] as string,
      filter,
      tag: (args['tag'] as string) || undefined,
      application: (args['application'] as string) || undefined,
      pieceLength: (args['piece_length'] as number | null) ?? undefined,
      rule: '1.5.3+',
    });
  }
  const storedAsGiven = {
    bind: (raw: unknown) => (isObj(raw) ? raw : {}),
    check: () => undefined,
  };

  return {
    parseJSON,
    bindCreateJob,
    jobKind: (type) => JOB_TYPES[type] ?? (KNOWN_OTHER_TYPES.has(type) ? storedAsGiven : undefined),
    taskOf,
  };
}
