/**
 * Management token of ONE model-server replica (TorchServe's token authorization: key_file.json keys, renewed with the API key).
 *
 * TorchServe 0.12 (util/TokenAuthorization.java, http/TokenAuthorizationHandler.java) works like this:
 * - at start it writes `key_file.json` in its working directory:
 *   `{"management":{"key","expiration time"},"inference":{"key","expiration time"},"API":{"key"}}`;
 *   every process draws its own random keys, so two replicas never share a key file;
 * - the management and inference keys expire (`token_expiration_min`, 60 by default), the API key does not;
 * - `GET /token?type=management` with `Authorization: Bearer <API key>` rotates the management key and REWRITES
 *   THE FILE; the HTTP answer is a 200 with an EMPTY body: the new key is only in the file.
 * - a rejected key gets HTTP 400 `{"type":"InvalidKeyException"}`.
 *
 * So renewing needs two things: the rotation call (made by the client, which knows the replica) and a way to read
 * the file again (the `read` function given here: a mounted file, a Secret kept in sync by a sidecar, ...).
 * This module knows neither HTTP nor Kubernetes.
 */
import { z } from 'zod';

/** What a token source may ask the client to do against its replica. */
export interface TokenContext {
  /** `GET /token?type=management` with the API key; resolves when the server rotated the management key. */
  rotateManagementKey(apiKey: string): Promise<void>;
}

/**
 * The management key of one replica. One instance per replica: renewal is single-flight per instance, so many
 * concurrent calls that were all rejected cause one rotation.
 */
export interface TokenSource {
  /** The key to send now (renewed first when the key file says it has expired); undefined sends no header. */
  get(ctx: TokenContext): Promise<string | undefined>;
  /**
   * The server rejected `rejected`: returns a different key to retry with, or throws
   * {@link TokenUnavailableError} (or the rotation call's own error) when there is none.
   */
  renew(rejected: string | undefined, ctx: TokenContext): Promise<string | undefined>;
  /** Every key value seen, for redaction of anything that might be logged. */
  secrets(): readonly string[];
}

/** No key can be produced (no API key, fixed key rejected, key file never shows the rotated key...). */
export class TokenUnavailableError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'TokenUnavailableError';
  }
}

const KeyWithExpiry = z.object({ key: z.string().min(1), 'expiration time': z.string().optional() });

/** The content of TorchServe's key_file.json. */
export const KeyFile = z.object({
  management: KeyWithExpiry,
  inference: KeyWithExpiry.optional(),
  API: z.object({ key: z.string().min(1) }).optional(),
});
export type KeyFile = z.infer<typeof KeyFile>;

/**
 * Parses key_file.json content. Errors never quote the content (it is full of secrets): JSON.parse's own message
 * includes a slice of the text, so it is not passed on.
 */
export function parseKeyFile(content: string): KeyFile {
  let raw: unknown;
  try {
    raw = JSON.parse(content);
  } catch {
    throw new TokenUnavailableError('key file is not valid JSON');
  }
  const parsed = KeyFile.safeParse(raw);
  if (!parsed.success) {
    const where = parsed.error.issues.map((i) => i.path.join('.') || '(root)').join(', ');
    throw new TokenUnavailableError(`key file does not have the key_file.json shape (at ${where})`);
  }
  return parsed.data;
}

/**
 * Java's `Instant.toString()` (`2024-01-16T22:23:32.952499Z`, 0/3/6/9 fraction digits) as epoch milliseconds;
 * undefined when absent or unreadable (then the key is treated as not expiring and renewed only on rejection).
 */
export function parseInstant(text: string | undefined): number | undefined {
  if (text === undefined) return undefined;
  const m = /^(\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2})(?:\.(\d+))?Z$/.exec(text.trim());
  if (!m) return undefined;
  const ms = Date.parse(`${m[1]}.${(m[2] ?? '').padEnd(3, '0').slice(0, 3)}Z`);
  return Number.isNaN(ms) ? undefined : ms;
}

export interface SecretTokenOptions {
  /**
   * Current content: either a bare management key, or key_file.json. Called on every request (keep it cheap: an
   * informer cache, a mounted file). For renewal it must reflect the server's own key file.
   */
  read: () => string | Promise<string>;
  /** Renew this long before the key file's expiration time. Default 10 s (clocks differ). */
  renewBeforeMs?: number;
  /** After a rotation, how many times to read the key file until it shows the new key. Default 5. */
  rereadAttempts?: number;
  /** Pause between those reads. Default 500 ms. */
  rereadDelayMs?: number;
  now?: () => number;
}

type Parsed = { kind: 'raw'; key: string } | { kind: 'file'; file: KeyFile; expiresAt: number | undefined };

/**
 * A token from a Secret value that holds either the management key alone (renewal impossible: a rejected key is
 * replaced only if the Secret changes) or the replica's key_file.json (renewal: rotate with the API key, then read
 * the file again).
 */
export class SecretTokenSource implements TokenSource {
  private readonly read: () => string | Promise<string>;
  private readonly renewBeforeMs: number;
  private readonly rereadAttempts: number;
  private readonly rereadDelayMs: number;
  private readonly now: () => number;
  private readonly seen = new Set<string>();
  private inflight: Promise<string> | undefined;

  constructor(opts: SecretTokenOptions) {
    this.read = opts.read;
    this.renewBeforeMs = opts.renewBeforeMs ?? 10_000;
    this.rereadAttempts = Math.max(1, opts.rereadAttempts ?? 5);
    this.rereadDelayMs = opts.rereadDelayMs ?? 500;
    this.now = opts.now ?? Date.now;
  }

  async get(ctx: TokenContext): Promise<string> {
    if (this.inflight) return this.inflight;
    const p = await this.load();
    if (p.kind === 'raw') return p.key;
    const key = p.file.management.key;
    if (this.expired(p) && p.file.API) return this.renew(key, ctx);
    return key;
  }

  renew(rejected: string | undefined, ctx: TokenContext): Promise<string> {
    if (this.inflight) return this.inflight;
    // A caller whose rejected key is already replaced (renewed by someone else) finds the new key on the first
    // read of doRenew and rotates nothing.
    const run = this.doRenew(rejected, ctx);
    this.inflight = run;
    // Clear after settling, whatever the outcome; the rejection itself is observed by the callers of `run`.
    run.then(
      () => (this.inflight = undefined),
      () => (this.inflight = undefined),
    );
    return run;
  }

  secrets(): readonly string[] {
    return [...this.seen];
  }

  private async doRenew(rejected: string | undefined, ctx: TokenContext): Promise<string> {
    const first = await this.load();
    if (first.kind === 'raw') {
      if (first.key !== rejected) return first.key;
      throw new TokenUnavailableError(
        'the management key was rejected (expired or wrong) and cannot be renewed: the Secret holds a bare key, ' +
          'not a key_file.json with the API key',
      );
    }
    if (this.usable(first, rejected)) return first.file.management.key;
    const apiKey = first.file.API?.key;
    if (apiKey === undefined) {
      throw new TokenUnavailableError(
        'the management key was rejected and the key file has no API key to renew it',
      );
    }
    await ctx.rotateManagementKey(apiKey);
    for (let i = 0; i < this.rereadAttempts; i++) {
      if (i > 0) await sleep(this.rereadDelayMs);
      const p = await this.load();
      if (p.kind === 'raw') {
        if (p.key !== rejected) return p.key;
      } else if (this.usable(p, rejected)) return p.file.management.key;
    }
    throw new TokenUnavailableError(
      'the server rotated the management key (GET /token?type=management) but the key file source still holds ' +
        "the rejected key; it must mirror the replica's own key_file.json",
    );
  }

  private usable(p: Parsed & { kind: 'file' }, rejected: string | undefined): boolean {
    return p.file.management.key !== rejected && !this.expired(p);
  }

  private expired(p: Parsed & { kind: 'file' }): boolean {
    return p.expiresAt !== undefined && this.now() >= p.expiresAt - this.renewBeforeMs;
  }

  private async load(): Promise<Parsed> {
    const text = (await this.read()).trim();
    if (text === '') throw new TokenUnavailableError('the management token source is empty');
    if (!text.startsWith('{')) {
      this.remember(text);
      return { kind: 'raw', key: text };
    }
    const file = parseKeyFile(text);
    this.remember(file.management.key);
    if (file.inference) this.remember(file.inference.key);
    if (file.API) this.remember(file.API.key);
    return { kind: 'file', file, expiresAt: parseInstant(file.management['expiration time']) };
  }

  private remember(key: string): void {
    this.seen.add(key);
    // Bounded: keys rotate every hour for the life of the operator.
    if (this.seen.size > 32) {
      const oldest = this.seen.values().next().value;
      if (oldest !== undefined) this.seen.delete(oldest);
    }
  }
}

/** A fixed management key (cannot be renewed). */
export function staticToken(key: string): TokenSource {
  return new SecretTokenSource({ read: () => key });
}

/** A bare key or key_file.json content, read by `read` each time (see {@link SecretTokenSource}). */
export function secretToken(
  read: () => string | Promise<string>,
  opts: Omit<SecretTokenOptions, 'read'> = {},
): TokenSource {
  return new SecretTokenSource({ ...opts, read });
}

function sleep(ms: number): Promise<void> {
  return new Promise((r) => setTimeout(r, ms));
}
