/**
 * The one redaction boundary. Whatever comes from outside the operator — manager job results, model-server answers,
 * error texts, URLs, endpoints — passes {@link redact} before it reaches status, conditions, Events or logs. The
 * runtime applies it where those leave the process (status writer, event recorder, logger), so a controller cannot
 * forget it; the clients apply it to their error messages too.
 *
 * The rule:
 * - a URL keeps its scheme, host, port and path; its userinfo and fragment are dropped and every query value is
 *   replaced by `***` (the parameter names stay, so a reader still sees which filter applied);
 * - every value of a Secret the operator has read ({@link rememberSecret}), and every secret a caller names
 *   (tokens it holds), is replaced by `***` wherever it appears.
 *
 * URLs are found and rewritten as text, not parsed and re-serialized: a URL with nothing to drop stays byte for
 * byte what it was (endpoints are the identity of replicas in status), and a malformed one is still redacted.
 */

export const REDACTED = '***';

/** Shorter values would mangle ordinary words (and are not worth keeping secret on their own). */
const MIN_SECRET_LENGTH = 4;
/**
 * Remembered values are redacted from everything, so they must be long enough not to be ordinary text: a Secret
 * may hold a user name or a region next to its keys. Keys, tokens and passwords worth the name are longer.
 */
const MIN_REMEMBERED_LENGTH = 8;
/** In a JSON secret, the fields holding key material (TorchServe key files, GCS service accounts): not its URLs. */
const SECRET_FIELD = /(^|[_-])(key|secret|token|password|credentials?)$/i;
/** Bound of the remembered values: rotated keys pile up over the operator's life. Oldest go first. */
const MAX_REMEMBERED = 4096;

const remembered = new Set<string>();
/** The remembered values, longest first (so a value containing another is replaced whole); rebuilt on change. */
let longestFirst: string[] | undefined;

/**
 * Remembers a secret value so that it is redacted wherever it appears later. A JSON document (a service account
 * file, a TorchServe key file) is remembered whole and by each of its key fields (`private_key`, `key`...), since a
 * message may quote one of them; its other fields (`token_uri`, `client_email`) are ordinary text.
 */
export function rememberSecret(value: string | undefined): void {
  if (value === undefined) return;
  const add = (v: string) => {
    const t = v.trim();
    if (t.length < MIN_REMEMBERED_LENGTH) return;
    remembered.delete(t);
    remembered.add(t);
    longestFirst = undefined;
  };
  add(value);
  const t = value.trim();
  if (t.startsWith('{')) {
    try {
      forEachSecretField(JSON.parse(t), false, add);
    } catch {
      // not JSON: remembered whole only
    }
  }
  while (remembered.size > MAX_REMEMBERED) remembered.delete(remembered.values().next().value!);
}

/** Forgets every remembered value (tests). */
export function forgetSecrets(): void {
  remembered.clear();
  longestFirst = undefined;
}

/** Calls `f` with every string under a field whose name says it is key material (at any depth below it). */
function forEachSecretField(v: unknown, secret: boolean, f: (s: string) => void): void {
  if (typeof v === 'string' && secret) f(v);
  else if (Array.isArray(v)) for (const x of v) forEachSecretField(x, secret, f);
  else if (v && typeof v === 'object')
    for (const [k, x] of Object.entries(v)) forEachSecretField(x, secret || SECRET_FIELD.test(k), f);
}

/** Anything that looks like `scheme://...` up to white space or a quote. Brackets stay inside: IPv6 hosts. */
const URL_IN_TEXT = /[A-Za-z][A-Za-z0-9+.-]*:\/\/[^\s"'<>`]+/g;

/** One URL: userinfo and fragment dropped, query values replaced, the rest kept as written. */
export function redactURL(url: string): string {
  const start = url.indexOf('://') + 3;
  if (start < 3) return url;
  const scheme = url.slice(0, start);
  let rest = url.slice(start);
  const authorityEnd = rest.search(/[/?#]/);
  const authority = authorityEnd < 0 ? rest : rest.slice(0, authorityEnd);
  const at = authority.lastIndexOf('@');
  if (at >= 0) rest = rest.slice(at + 1);
  const hash = rest.indexOf('#');
  if (hash >= 0) rest = rest.slice(0, hash);
  const q = rest.indexOf('?');
  if (q < 0) return scheme + rest;
  const params = rest
    .slice(q + 1)
    .split('&')
    .map((p) => {
      const eq = p.indexOf('=');
      return eq < 0 ? p : `${p.slice(0, eq)}=${REDACTED}`;
    });
  return `${scheme}${rest.slice(0, q)}?${params.join('&')}`;
}

/** Text with every URL redacted and every remembered or given secret replaced by `***`. */
export function redact(text: string, secrets: readonly (string | undefined)[] = []): string {
  let out = text.includes('://') ? text.replace(URL_IN_TEXT, redactURL) : text;
  longestFirst ??= [...remembered].sort((a, b) => b.length - a.length);
  const given = secrets.filter((s): s is string => s !== undefined).sort((a, b) => b.length - a.length);
  for (const s of [...given, ...longestFirst]) {
    if (s.length >= MIN_SECRET_LENGTH && out.includes(s)) out = out.split(s).join(REDACTED);
  }
  return out;
}

/** A copy of a JSON-like value with {@link redact} applied to every string in it (keys stay). */
export function redactDeep<T>(value: T, secrets: readonly (string | undefined)[] = []): T {
  const walk = (v: unknown): unknown => {
    if (typeof v === 'string') return redact(v, secrets);
    if (Array.isArray(v)) return v.map(walk);
    if (v instanceof Error)
      return { type: v.name, message: redact(v.message, secrets), stack: redact(v.stack ?? '', secrets) };
    if (v && typeof v === 'object' && Object.getPrototypeOf(v) === Object.prototype) {
      return Object.fromEntries(Object.entries(v).map(([k, x]) => [k, walk(x)]));
    }
    return v;
  };
  return walk(value) as T;
}
