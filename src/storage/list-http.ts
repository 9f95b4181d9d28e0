/**
 * The listers' HTTP. The S3 and Azure SDKs sign a listing's requests and parse its pages, but their own HTTP clients
 * read a whole answer into memory with no size bound and wait as long as a server trickles bytes: a page of an
 * endpoint the spec chose could fill the operator's heap or hold a worker forever. So each SDK is given this client
 * instead (S3's request handler, Azure's HttpClient) and gcs pages are requested here directly: one undici exchange
 * per request with a time-out over the whole of it, a 2xx body counted as it streams and abandoned past the page
 * cap, an error body cut to its first {@link MAX_ERROR_BODY_BYTES}.
 *
 * A bound that is hit aborts the whole listing ({@link ListRun.hit}) rather than failing one request: the SDKs retry
 * failed requests, and a page over its cap or a server that does not answer gains nothing from that.
 */
import { request } from 'undici';
import { SourceBudget } from '../http/budget.ts';
import type { ListBounds } from './list-bounds.ts';

/**
 * One listing in progress: a {@link SourceBudget} in a listing's words (pages, objects, keys), its bounds the
 * listing's: the caller's signal, the whole-listing time-out and a bound hit end every request of it.
 */
export class ListRun extends SourceBudget {
  constructor(bounds: ListBounds, callerSignal?: AbortSignal) {
    super(
      {
        maxAnswerBytes: bounds.maxPageBytes,
        // A listing's total is bounded by its pages and what it keeps of them.
        maxTotalBytes: Number.POSITIVE_INFINITY,
        maxAnswers: bounds.maxPages,
        maxEntries: bounds.maxListed,
        maxEntryChars: Number.POSITIVE_INFINITY,
        maxEntriesChars: bounds.maxKeyBytes,
        requestTimeoutMs: bounds.requestTimeoutMs,
        timeoutMs: bounds.timeoutMs,
      },
      { signal: callerSignal, terms: LIST_TERMS },
    );
  }

  /** A page is about to be requested. */
  page(): void {
    this.answer();
  }

  /** A key is kept. */
  key(key: string): void {
    this.entry(key);
  }
}

const LIST_TERMS = {
  whole: 'the listing',
  answer: 'a page of the listing',
  answers: 'pages',
  holder: 'the prefix',
  entries: 'objects',
  entryText: 'the listed keys',
};

export interface Exchanged {
  status: number;
  headers: Record<string, string>;
  body: Buffer;
}

/** One request of a listing, bounded as the module says. A transport failure is thrown as it is (the SDK may retry). */
export async function exchange(
  run: ListRun,
  url: string,
  init: { method: string; headers: Record<string, string>; body?: string | Uint8Array | undefined },
): Promise<Exchanged> {
  run.check();
  const req = run.request();
  try {
    const res = await request(url, {
      method: init.method as 'GET',
      headers: init.headers,
      body: init.body ?? null,
      signal: req.signal,
      // undici's own idle time-outs, below ours: a server trickling a byte a minute must not reset anything.
      headersTimeout: req.ms,
      bodyTimeout: req.ms,
    });
    const body = await run.read(res.body, { error: res.statusCode >= 300 });
    const headers: Record<string, string> = {};
    for (const [k, v] of Object.entries(res.headers))
      if (v !== undefined) headers[k] = Array.isArray(v) ? v.join(', ') : v;
    return { status: res.statusCode, headers, body };
  } catch (e) {
    if (run.signal.aborted) throw (run.signal.reason as unknown) ?? e;
    if (req.timedOut()) throw run.requestTimedOut(req.ms);
    throw e;
  } finally {
    req.done();
  }
}

/** The parts of a Smithy HttpRequest (the S3 SDK's) that make a request. */
interface SmithyRequest {
  method: string;
  protocol: string;
  hostname: string;
  port?: number | undefined;
  path: string;
  query?: Record<string, string | string[] | null> | undefined;
  headers: Record<string, string>;
  body?: unknown;
}

/** The S3 SDK's `requestHandler`: its requests through {@link exchange}. */
export function s3RequestHandler(run: ListRun) {
  return {
    async handle(req: SmithyRequest) {
      const query: string[] = [];
      for (const [k, v] of Object.entries(req.query ?? {})) {
        if (v === null) query.push(encodeURIComponent(k));
        else
          for (const one of Array.isArray(v) ? v : [v])
            query.push(`${encodeURIComponent(k)}=${encodeURIComponent(one)}`);
      }
      const port = req.port ? `:${req.port}` : '';
      const url = `${req.protocol}//${req.hostname}${port}${req.path}${query.length ? `?${query.join('&')}` : ''}`;
      const res = await exchange(run, url, {
        method: req.method,
        headers: req.headers,
        body: typeof req.body === 'string' || req.body instanceof Uint8Array ? req.body : undefined,
      });
      // A plain object: the SDK checks a response by its shape (statusCode, headers), and a Uint8Array body is
      // taken as the collected body.
      return { response: { statusCode: res.status, headers: res.headers, body: res.body } };
    },
    updateHttpClientConfig(): void {},
    httpHandlerConfigs(): Record<string, never> {
      return {};
    },
    destroy(): void {},
  };
}

/** The parts of Azure's request (core-http-compat's WebResourceLike) that make a request. */
interface AzureRequest {
  url: string;
  method: string;
  headers: { rawHeaders(): Record<string, string> };
  body?: unknown;
}

/** Azure's HttpHeadersLike, as far as its pipeline reads a response's. */
function azureHeaders(raw: Record<string, string>) {
  const lower = new Map(Object.entries(raw).map(([k, v]) => [k.toLowerCase(), { name: k, value: v }]));
  const headers = {
    get: (name: string) => lower.get(name.toLowerCase())?.value,
    contains: (name: string) => lower.has(name.toLowerCase()),
    set: (name: string, value: string | number) =>
      void lower.set(name.toLowerCase(), { name, value: String(value) }),
    remove: (name: string) => lower.delete(name.toLowerCase()),
    rawHeaders: () => Object.fromEntries([...lower.values()].map((h) => [h.name, h.value])),
    headersArray: () => [...lower.values()],
    headerNames: () => [...lower.values()].map((h) => h.name),
    headerValues: () => [...lower.values()].map((h) => h.value),
    toJson: () => Object.fromEntries([...lower.values()].map((h) => [h.name, h.value])),
    clone: () => azureHeaders(raw),
  };
  return headers;
}

/** Azure's `httpClient` (a core-http `RequestPolicy`): its requests through {@link exchange}. */
export function azureHttpClient(run: ListRun) {
  return {
    async sendRequest(req: AzureRequest) {
      const res = await exchange(run, req.url, {
        method: req.method,
        headers: req.headers.rawHeaders(),
        body: typeof req.body === 'string' ? req.body : undefined,
      });
      return {
        request: req,
        status: res.status,
        headers: azureHeaders(res.headers),
        bodyAsText: res.body.toString('utf8'),
      };
    },
  };
}
