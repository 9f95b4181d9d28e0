/**
 * The agent's one caller is the operator: every call carries `Authorization: Bearer <token>`, the token the
 * operator also holds, mounted here from a Secret. The file is read again when it changes (a rotated Secret is
 * seen without a restart: the kubelet swaps the mounted file). The comparison is constant-time: both sides are
 * hashed to 32 bytes first, so `timingSafeEqual` compares equal lengths and the time says nothing about the
 * token's length or prefix.
 */
import { createHash, timingSafeEqual } from 'node:crypto';
import { readFile, stat } from 'node:fs/promises';
import { rememberSecret } from '../redact.ts';

export type AuthOutcome =
  { ok: true } | { ok: false; status: 401 | 403 | 503; reason: string; message: string };

const digest = (s: string) => createHash('sha256').update(s, 'utf8').digest();

/** Whether `given` is `expected`, in time independent of both. An empty expected token matches nothing. */
export function tokenMatches(given: string, expected: string): boolean {
  const equal = timingSafeEqual(digest(given), digest(expected));
  return equal && expected.length > 0;
}

/** The token in a mounted file, re-read when its modification time or size changes. */
export function tokenFile(path: string): () => Promise<string | undefined> {
  let cached: { key: string; token: string } | undefined;
  return async () => {
    try {
      const st = await stat(path);
      const key = `${st.mtimeMs}:${st.size}:${st.ino}`;
      if (cached?.key !== key) {
        cached = { key, token: (await readFile(path, 'utf8')).trim() };
        rememberSecret(cached.token); // never in a log line or an answer, whatever quotes it
      }
      return cached.token === '' ? undefined : cached.token;
    } catch {
      return undefined;
    }
  };
}

/** The outcome of a request's Authorization header against the current token. */
export function authorize(authorization: string | undefined, token: string | undefined): AuthOutcome {
  if (token === undefined)
    return {
      ok: false,
      status: 503,
      reason: 'NoToken',
      message: 'the agent has no token: mount the Secret with the token and pass its file as --token-file',
    };
  const m = /^Bearer[ \t]+(\S+)[ \t]*$/i.exec(authorization ?? '');
  if (!m)
    return {
      ok: false,
      status: 401,
      reason: 'Unauthenticated',
      message: 'send the operator\'s token as "Authorization: Bearer <token>"',
    };
  if (!tokenMatches(m[1]!, token))
    return { ok: false, status: 403, reason: 'Forbidden', message: "the token is not the operator's" };
  return { ok: true };
}
