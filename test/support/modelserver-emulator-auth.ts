/**
 * The model-server emulator's token authorization (TokenAuthorizationHandler): keys with expiry, key_file.json,
 * the management key check and `/token` rotation. The base layer of the emulator's instance class, which holds
 * the options and counters every layer uses.
 */
import { randomBytes } from 'node:crypto';
import { writeFileSync } from 'node:fs';
import type { IncomingMessage } from 'node:http';
import { HttpError, type Reply } from './modelserver-emulator-http.ts';
import {
  type ModelServerEmulatorAuth,
  type ModelServerEmulatorOptions,
  emptyStats,
} from './modelserver-emulator-types.ts';

const TOKEN_AUTHORIZATION_FAILED =
  'Token Authorization failed. Token either incorrect, expired, or not provided correctly';
const TOKEN_AUTHENTICATION_FAILED =
  'Token Authentication failed. Token either incorrect, expired, or not provided correctly';

/** Java's Instant.toString() with microseconds, as TorchServe writes expiration times. */
function javaInstant(ms: number): string {
  const micros = String(Math.floor(Math.random() * 1000)).padStart(3, '0');
  return new Date(ms).toISOString().replace('Z', `${micros}Z`);
}

const newKey = () => randomBytes(6).toString('base64url');

export abstract class EmulatorAuth {
  stats = emptyStats();

  protected readonly opts: ModelServerEmulatorOptions;
  protected readonly now: () => number;
  protected auth:
    | { management: string; inference: string; api: string; managementExp: number; inferenceExp: number }
    | undefined;

  constructor(opts: ModelServerEmulatorOptions) {
    this.opts = opts;
    this.now = opts.now ?? Date.now;
    if (opts.auth) this.initKeys(typeof opts.auth === 'object' ? opts.auth : {});
  }

  // ---- public API ----

  keyFile(): string | undefined {
    if (!this.auth) return undefined;
    return JSON.stringify(
      {
        management: { key: this.auth.management, 'expiration time': javaInstant(this.auth.managementExp) },
        inference: { key: this.auth.inference, 'expiration time': javaInstant(this.auth.inferenceExp) },
        API: { key: this.auth.api },
      },
      null,
      2,
    );
  }

  keys(): { management: string; inference: string; api: string } | undefined {
    return this.auth
      ? { management: this.auth.management, inference: this.auth.inference, api: this.auth.api }
      : undefined;
  }

  expireManagementKey(): void {
    if (!this.auth) throw new Error('token authorization is off');
    this.auth.managementExp = this.now() - 1;
    this.writeKeyFile();
  }

  // ---- keys ----

  protected expiryMs(): number {
    return typeof this.opts.auth === 'object' && this.opts.auth.expiryMs !== undefined
      ? this.opts.auth.expiryMs
      : 60 * 60_000;
  }

  protected initKeys(a: ModelServerEmulatorAuth): void {
    const exp = this.now() + (a.expiryMs ?? this.expiryMs());
    this.auth = {
      management: a.managementKey ?? newKey(),
      inference: a.inferenceKey ?? newKey(),
      api: a.apiKey ?? newKey(),
      managementExp: exp,
      inferenceExp: exp,
    };
    this.writeKeyFile();
  }

  private writeKeyFile(): void {
    const content = this.keyFile();
    if (this.opts.keyFilePath && content !== undefined) {
      writeFileSync(this.opts.keyFilePath, content, { mode: 0o600 });
    }
  }

  // ---- token authorization ----

  protected checkKey(req: IncomingMessage, kind: 'management' | 'api'): void {
    const a = this.auth!;
    const header = req.headers['authorization'];
    const token = typeof header === 'string' ? header.replace(/^Bearer\s+/i, '').trim() : undefined;
    const ok = kind === 'api' ? token === a.api : token === a.management && this.now() < a.managementExp;
    if (!ok) {
      this.stats.authFailures++;
      throw new HttpError(400, 'InvalidKeyException', TOKEN_AUTHORIZATION_FAILED);
    }
  }

  protected handleToken(req: IncomingMessage, url: URL): Reply {
    // Every failure in the token branch (wrong key, wrong type) becomes the "Authentication" variant.
    try {
      this.checkKey(req, 'api');
    } catch {
      throw new HttpError(400, 'InvalidKeyException', TOKEN_AUTHENTICATION_FAILED);
    }
    const type = url.searchParams.get('type');
    const a = this.auth!;
    if (type === 'management') {
      a.management = newKey();
      a.managementExp = this.now() + this.expiryMs();
    } else if (type === 'inference') {
      a.inference = newKey();
      a.inferenceExp = this.now() + this.expiryMs();
    } else {
      this.stats.authFailures++;
      throw new HttpError(400, 'InvalidKeyException', TOKEN_AUTHENTICATION_FAILED);
    }
    this.stats.tokenRotations++;
    this.writeKeyFile();
    // NettyUtils.sendJsonResponse(ctx, "") — the new key is NOT in the answer.
    return { status: 200, raw: '' };
  }
}
