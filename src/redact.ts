/**
 * The one redaction boundary. Whatever comes from outside the operator — manager job results, model-server answers,
 * error texts, URLs, endpoints — passes {@link redact} before it reaches status, conditions, Events or logs. The
 * runtime applies it where those leave the process (status writer, event recorder, logger), so a controller cannot
 * forget it; the clients apply it to their error messages too.
 *
 * The rule:
 * - a URL keeps its scheme, host, port and path; its userinfo and fragment are dropped and every query value is
 *   replaced by `***` (the parameter names stay, so a reader still sees which filter applied);
 * - every value of a Secret the operator has read ({@link rememberSecretData}), and every secret a caller names
 *   (tokens it holds), is replaced by `***` wherever it appears, as is or JSON-escaped, `\u0026`-escaped or
 *   percent-encoded ({@link secretForms}); a Secret's values are remembered while it exists and as it is now;
 * - redaction comes before any cut to length ({@link redactBounded}), so no secret's first characters survive;
 *   text longer than {@link MAX_REDACTED_INPUT} is cut first, at a point where no secret, URL or token is split.
 *
 * URLs are found and rewritten as text, not parsed and re-serialized: a URL with nothing to drop stays byte for
 * byte what it was (endpoints are the identity of replicas in status), and a malformed one is still redacted.
 */

export const REDACTED = '***';

/** Shorter values would mangle ordinary words (and are not worth keeping secret on their own). */
const MIN_SECRET_LENGTH = 4;
/**
 * Remembered values are redacted from everything, so they must be long enough not to be ordinary text: a Secret
 * may hold a user name or a region next to its keys. Keys, tokens and passwords worth the name are longer; a
 * shorter value is remembered only under a key whose name says it is secret ({@link SECRET_FIELD}), and then
 * replaced only where it stands alone (not inside a longer word).
 */
const MIN_REMEMBERED_LENGTH = 8;
/** A field or Secret key holding key material (TorchServe key files, GCS service accounts, `tls.key`): not URLs. */
const SECRET_FIELD = /(^|[_.-]|[a-z](?=[A-Z]))(key|secret|token|password|passwd|credentials?)$/i;
/** Bound of the Secrets whose values are remembered (and of values remembered without a Secret). Oldest go first. */
const MAX_REMEMBERED = 4096;

/** One value to replace, in each of its forms. */
interface Secret {
  /** The value and its escaped and encoded forms, longest first. */
  forms: string[];
  /** Short: replaced only where it stands alone, by this pattern (all forms). */
  alone?: RegExp;
}

/** Values remembered per Secret (`namespace/name`): replaced when the Secret changes, dropped when it is gone. */
const bySecret = new Map<string, Secret[]>();
/** Values remembered without a Secret, least recently remembered first. */
const loose = new Map<string, Secret>();
/** Every remembered value, longest first (so a value containing another is replaced whole); rebuilt on change. */
let longestFirst: Secret[] | undefined;

/**
 * The forms a value takes in the text around it: as is, JSON-escaped (a PEM key's newlines as `\n`), with HTML
 * characters `\u0026`-escaped as Go's encoding/json writes them, and percent-encoded as JavaScript and Go encode a
 * query value (upper and lower case hex, space as `%20` and `+`).
 */
export function secretForms(value: string): string[] {
  const json = JSON.stringify(value).slice(1, -1);
  const goJSON = json.replace(
    /[<>&\u2028\u2029]/g,
    (c) => `\\u${c.charCodeAt(0).toString(16).padStart(4, '0')}`,
  );
  const percent = encodeURIComponent(value);
  const goQuery = percent
    .replace(/[!'()*]/g, (c) => `%${c.charCodeAt(0).toString(16).toUpperCase()}`)
    .replace(/%20/g, '+');
  const lower = (t: string) => t.replace(/%[0-9A-F]{2}/g, (h) => h.toLowerCase());
  const forms = new Set([value, json, goJSON, percent, goQuery, lower(percent), lower(goQuery)]);
  return [...forms].sort((a, b) => b.length - a.length);
}

const escapeRegExp = (t: string) => t.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');

function secret(value: string, short: boolean): Secret {
  const forms = secretForms(value);
  if (!short) return { forms };
  const alternatives = forms.map(escapeRegExp).join('|');
  return { forms, alone: new RegExp(`(?<![A-Za-z0-9])(?:${alternatives})(?![A-Za-z0-9])`, 'g') };
}

/** The values of one remembered value: itself and, for a JSON document, each of its key fields. */
function valuesOf(value: string, secretKey: boolean, out: Map<string, Secret>): void {
  const add = (v: string, named: boolean) => {
    const t = v.trim();
    const min = named ? MIN_SECRET_LENGTH : MIN_REMEMBERED_LENGTH;
    if (t.length < min || out.has(t)) return;
    out.set(t, secret(t, t.length < MIN_REMEMBERED_LENGTH));
  };
  add(value, secretKey);
  const t = value.trim();
  if (t.startsWith('{')) {
    try {
      forEachSecretField(JSON.parse(t), false, (v) => add(v, true));
    } catch {
      // not JSON: remembered whole only
    }
  }
}

/**
 * Remembers a secret value so that it is redacted wherever it appears later. A JSON document (a service account
 * file, a TorchServe key file) is remembered whole and by each of its key fields (`private_key`, `key`...), since a
 * message may quote one of them; its other fields (`token_uri`, `client_email`) are ordinary text.
 */
export function rememberSecret(value: string | undefined): void {
  if (value === undefined) return;
  const found = new Map<string, Secret>();
  valuesOf(value, false, found);
  for (const [v, s] of found) {
    loose.delete(v);
    loose.set(v, s);
  }
  while (loose.size > MAX_REMEMBERED) loose.delete(loose.keys().next().value!);
  longestFirst = undefined;
}

/**
 * Remembers the values of one Secret (`data`: key -> decoded value), replacing what was remembered for it before:
 * a changed Secret's old values are dropped, so what is remembered stays bounded by the Secrets in use. A value
 * under a key named like a secret (`password`, `token`, `access_key`, `tls.key`) is remembered even when short.
 */
export function rememberSecretData(secretName: string, data: Record<string, string>): void {
  const found = new Map<string, Secret>();
  for (const [key, value] of Object.entries(data)) valuesOf(value, SECRET_FIELD.test(key), found);
  bySecret.delete(secretName);
  bySecret.set(secretName, [...found.values()]);
  while (bySecret.size > MAX_REMEMBERED) bySecret.delete(bySecret.keys().next().value!);
  longestFirst = undefined;
}

/** Drops what was remembered for a Secret that is gone. */
export function forgetSecretData(secretName: string): void {
  if (bySecret.delete(secretName)) longestFirst = undefined;
}

/** How many values are remembered, in how many Secrets (bounded: see {@link MAX_REMEMBERED}). */
export function rememberedCount(): { secrets: number; values: number } {
  let values = loose.size;
  for (const v of bySecret.values()) values += v.length;
  return { secrets: bySecret.size, values };
}

/** Forgets every remembered value (tests). */
export function forgetSecrets(): void {
  loose.clear();
  bySecret.clear();
  longestFirst = undefined;
}

/** Calls `f` with every string under a field whose name says it is key material (at any depth below it). */
function forEachSecretField(v: unknown, secret: boolean, f: (s: string) => void): void {
  if (typeof v === 'string' && secret) f(v);
  else if (Array.isArray(v)) for (const x of v) forEachSecretField(x, secret, f);
  else if (v && typeof v === 'object')
    for (const [k, x] of Object.entries(v)) forEachSecretField(x, secret || SECRET_FIELD.test(k), f);
}

/**
 * A URL in text is `scheme://...` up to white space, a quote or an angle bracket (brackets stay inside: IPv6
 * hosts). It used to be found by one regular expression, whose backtracking made text like `aaaa...a://` cost the
 * square of its length; {@link redactURLs} finds the same URLs in one pass: from each `://` back over the scheme's
 * characters (never past the previous URL) and forward to the first stop.
 */
/** White space as `\s` has it, a quote, an angle bracket or a backquote: where a URL in text ends. */
function isURLStop(c: number): boolean {
  if (c <= 32) return c === 32 || (c >= 9 && c <= 13);
  if (c < 127) return c === 34 || c === 39 || c === 60 || c === 62 || c === 96;
  return (
    c === 0xa0 ||
    c === 0x1680 ||
    (c >= 0x2000 && c <= 0x200a) ||
    c === 0x2028 ||
    c === 0x2029 ||
    c === 0x202f ||
    c === 0x205f ||
    c === 0x3000 ||
    c === 0xfeff
  );
}

const isLetter = (c: number) => (c >= 65 && c <= 90) || (c >= 97 && c <= 122);
const isSchemeChar = (c: number) => isLetter(c) || (c >= 48 && c <= 57) || c === 43 || c === 45 || c === 46;

/**
 * Text with every URL in it redacted ({@link redactURL}), in time linear in its length: each character is looked
 * at a bounded number of times (scheme runs before two `://` never overlap; a URL's end is searched for only once
 * its scheme is there, and the search resumes after it). `reads` counts the characters looked at, for a test.
 */
export function redactURLs(text: string, reads?: { count: number }): string {
  let out = '';
  let last = 0;
  let from = 0;
  let read = 0;
  for (;;) {
    const sep = text.indexOf('://', from);
    read += (sep < 0 ? text.length : sep + 3) - from;
    if (sep < 0) break;
    let start = sep;
    while (start > last && isSchemeChar(text.charCodeAt(start - 1))) start--;
    read += sep - start;
    while (start < sep && !isLetter(text.charCodeAt(start))) start++;
    if (start === sep) {
      from = sep + 1;
      continue;
    }
    // By hand, not a sticky expression: V8's exec costs more than the characters it reads on long text.
    let end = sep + 3;
    while (end < text.length && !isURLStop(text.charCodeAt(end))) end++;
    read += end - sep;
    if (end === sep + 3) {
      from = sep + 1;
      continue;
    }
    out += text.slice(last, start) + redactURL(text.slice(start, end));
    last = from = end;
  }
  if (reads) reads.count += read;
  return last === 0 ? text : out + text.slice(last);
}

/**
 * Longest text redaction reads. What lies beyond is cut off first ({@link safePrefix}): a body of up to 16 MiB from
 * a model server or an agent would otherwise cost its full length for each remembered secret, for a message that
 * keeps 1 KiB of it.
 */
export const MAX_REDACTED_INPUT = 64 * 1024;
/** Marks text that redaction cut. */
const CUT = '…';
/** Characters that end a token: a URL or an unbroken secret never holds one. */
const TOKEN_END = /[\s"'<>`,;]/;

/**
 * The first `max` characters of `text`, shortened so that nothing cut in half survives: a secret that begins before
 * the cut and ends after it is left out from its first character, and so is the trailing token (up to white space
 * or a quote), so a URL's userinfo or query value, or an unknown token, is never kept in part.
 */
function safePrefix(text: string, max: number, secrets: readonly Secret[]): string {
  let end = max;
  const code = text.charCodeAt(end - 1);
  if (code >= 0xd800 && code <= 0xdbff) end--; // a surrogate pair is never split
  for (let changed = true, rounds = 0; changed && rounds < 8; rounds++) {
    changed = false;
    for (const s of secrets)
      for (const f of s.forms) {
        if (f.length < 2) continue;
        const from = Math.max(0, end - f.length + 1);
        const at = text.slice(from, end + f.length - 1).indexOf(f);
        if (at >= 0 && from + at < end) {
          end = from + at;
          changed = true;
        }
      }
  }
  let cut = end;
  while (cut > 0 && !TOKEN_END.test(text[cut - 1]!)) cut--;
  return text.slice(0, cut);
}

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

/**
 * Text with every URL redacted and every remembered or given secret replaced by `***`, in any of its forms
 * ({@link secretForms}). Text longer than {@link MAX_REDACTED_INPUT} is cut first, safely ({@link safePrefix}), and
 * ends with `…`: the work is linear in the text and bounded whatever its length.
 */
export function redact(text: string, secrets: readonly (string | undefined)[] = []): string {
  longestFirst ??= [...loose.values(), ...[...bySecret.values()].flat()].sort(
    (a, b) => b.forms[0]!.length - a.forms[0]!.length,
  );
  const given = secrets
    .filter((s): s is string => s !== undefined && s.length >= MIN_SECRET_LENGTH)
    .sort((a, b) => b.length - a.length)
    .map((s) => ({ forms: secretForms(s) }) as Secret);
  const all = [...given, ...longestFirst];
  const cut = text.length > MAX_REDACTED_INPUT;
  let out = cut ? safePrefix(text, MAX_REDACTED_INPUT, all) : text;
  if (out.includes('://')) out = redactURLs(out);
  for (const s of all) {
    if (s.alone) {
      if (s.forms.some((f) => out.includes(f))) out = out.replace(s.alone, REDACTED);
      continue;
    }
    for (const f of s.forms) if (out.includes(f)) out = out.split(f).join(REDACTED);
  }
  return cut ? out + CUT : out;
}

/**
 * {@link redact}, then at most `max` characters (with `…` when cut). In this order: a cut first would leave the
 * first characters of a secret or a URL's query that redaction no longer recognises.
 */
export function redactBounded(
  text: string,
  max: number,
  secrets: readonly (string | undefined)[] = [],
): string {
  const r = redact(text, secrets);
  return r.length > max ? r.slice(0, max) + '…' : r;
}

/**
 * A copy of a value with {@link redact} applied to every string in it (keys stay), as it will be serialised: a
 * class instance by its `toJSON` when it has one (a URL, a Date), else by its own enumerable fields (what
 * JSON.stringify and pino write of it); an Error by its type, message, stack, fields and cause. Cycles and depth are
 * bounded (an error's cause may hold a socket).
 */
export function redactDeep<T>(value: T, secrets: readonly (string | undefined)[] = []): T {
  const seen = new WeakSet<object>();
  const walk = (v: unknown, depth: number): unknown => {
    if (typeof v === 'string') return redact(v, secrets);
    if (v === null || typeof v !== 'object') return v;
    if (seen.has(v)) return '[Circular]';
    if (depth > 10) return '[Object]';
    seen.add(v);
    try {
      if (Array.isArray(v)) return v.map((x) => walk(x, depth + 1));
      if (v instanceof Error) {
        const out: Record<string, unknown> = {
          type: v.name,
          message: redact(v.message, secrets),
          stack: redact(v.stack ?? '', secrets),
        };
        for (const [k, x] of Object.entries(v)) if (!(k in out)) out[k] = walk(x, depth + 1);
        if (v.cause !== undefined) out['cause'] = walk(v.cause, depth + 1);
        return out;
      }
      const toJSON = (v as { toJSON?: unknown }).toJSON;
      if (typeof toJSON === 'function') return walk(toJSON.call(v), depth + 1);
      if (v instanceof Map) return walk(Object.fromEntries(v), depth + 1);
      if (v instanceof Set) return walk([...v], depth + 1);
      return Object.fromEntries(Object.entries(v).map(([k, x]) => [k, walk(x, depth + 1)]));
    } finally {
      seen.delete(v);
    }
  };
  return walk(value, 0) as T;
}
