/**
 * What the Hub's answers mean: its JSON shapes (only the fields peerload reads; the Hub adds fields freely) and
 * its error answers turned into {@link HubError}s by status and `X-Error-Code`, as huggingface_hub's
 * `hf_raise_for_status` reads them. Pure.
 */
import { z } from 'zod';
import { parseRetryAfter } from '../http/retry.ts';
import { headerValue, type HttpResponse } from '../http/request.ts';
import { HubError, HubReason } from './errors.ts';

export const RepoInfoSchema = z.object({ id: z.string(), sha: z.string().regex(/^[0-9a-f]{40}$/) });

const LfsSchema = z.object({ oid: z.string().regex(/^[0-9a-f]{64}$/), size: z.number().int().nonnegative() });

export const TreeEntrySchema = z.discriminatedUnion('type', [
  z.object({
    type: z.literal('file'),
    path: z.string().min(1).max(4096),
    size: z.number().int().nonnegative(),
    oid: z.string(),
    lfs: LfsSchema.optional(),
  }),
  z.object({ type: z.literal('directory'), path: z.string() }),
]);
export const TreePageSchema = z.array(TreeEntrySchema).max(100_000);
export type TreeEntry = z.output<typeof TreeEntrySchema>;

export interface AnswerContext {
  operation: string;
  repo: string;
  revision: string;
  /** Whether the request carried a token. */
  withToken: boolean;
}

/**
 * The `X-Error-Code`s the Hub sends (huggingface_hub's `hf_raise_for_status` reads these): only one of them is
 * repeated in a message. An endpoint may be any host a tenant names, so its headers and body are never quoted
 * (a read channel into whatever the operator can reach, cloud metadata included).
 */
export const HUB_ERROR_CODES: ReadonlySet<string> = new Set([
  'RepoNotFound',
  'RevisionNotFound',
  'EntryNotFound',
  'GatedRepo',
  'DisabledRepo',
]);

/** The Hub's `X-Error-Message` for a token it does not know (compared, never quoted). */
const TOKEN_UNKNOWN = 'Invalid credentials in Authorization header';

/**
 * The error of a non-2xx answer, in the Hub's terms and with the fix. Its words are ours: the status, a known
 * `X-Error-Code`, the repository and revision the spec names; none of the answer's text.
 */
export function answerError(res: HttpResponse, ctx: AnswerContext): HubError {
  const given = headerValue(res.headers['x-error-code']);
  const code = given !== undefined && HUB_ERROR_CODES.has(given) ? given : undefined;
  const said = code === undefined ? '' : ` (${code})`;
  const init = (kind: 'auth' | 'notFound' | 'terminal' | 'retryable', detail: string) => ({
    kind,
    status: res.status,
    operation: ctx.operation,
    detail,
    code,
    retryAfterMs: parseRetryAfter(headerValue(res.headers['retry-after'])),
  });
  const { repo, revision } = ctx;
  if (res.status === 401 && headerValue(res.headers['x-error-message']) === TOKEN_UNKNOWN)
    return new HubError(
      HubReason.TokenRejected,
      init('auth', `the Hub rejected the token${said}: give a valid token (a user access token, hf_...)`),
      'token',
    );
  if (res.status === 401 && !ctx.withToken)
    return new HubError(
      HubReason.TokenRequired,
      init(
        'auth',
        code === 'GatedRepo'
          ? `${repo} is gated${said}: give a token of an account granted access to it`
          : `${repo} is private or does not exist${said}: give a token that can read it, or check the repository name`,
      ),
      'token',
    );
  if (res.status === 401 || res.status === 403)
    return new HubError(
      HubReason.Forbidden,
      init(
        'auth',
        `the token may not read ${repo}${said}: ${code === 'GatedRepo' ? "request access to the gated repository on the Hub with the token's account" : 'use a token whose account has access (read scope)'}`,
      ),
      'token',
    );
  if (res.status === 404 && code === 'RevisionNotFound')
    return new HubError(
      HubReason.RevisionNotFound,
      init(
        'notFound',
        `${repo} has no revision "${revision}"${said}: name an existing branch, tag or full commit sha`,
      ),
      'revision',
    );
  if (res.status === 404 && (code === 'RepoNotFound' || given === undefined))
    return new HubError(
      HubReason.RepoNotFound,
      init(
        'notFound',
        `no repository ${repo} that the ${ctx.withToken ? 'token' : 'anonymous caller'} can see${said}: check the name (namespace/name)`,
      ),
      'repo',
    );
  if (res.status === 429 || res.status >= 500 || res.status === 408)
    return new HubError(HubReason.Unavailable, init('retryable', `the Hub is unavailable${said}`));
  return new HubError(HubReason.BadAnswer, init('terminal', `unexpected answer${said}`));
}

/** The `rel="next"` URL of a `Link` header (GitHub's format, which the Hub's pagination uses). */
export function nextLink(link: string | undefined): string | undefined {
  if (!link) return undefined;
  for (const part of link.split(',')) {
    const m = /^\s*<([^>]*)>\s*;(.*)$/.exec(part);
    if (m && /(^|;)\s*rel="?next"?\s*(;|$)/.test(m[2]!)) return m[1];
  }
  return undefined;
}
