/**
 * `WWW-Authenticate` as registries send it (RFC 7235: `Bearer realm="…",service="…",scope="…"` or
 * `Basic realm="…"`). Hand-written: a registry sends one challenge of a handful of parameters, and the npm parsers
 * of this header are unmaintained or pull in HTTP frameworks; this reads auth-params (token or quoted-string values,
 * with backslash escapes) and nothing else.
 */

export interface Challenge {
  /** Lower-case: `bearer`, `basic`. */
  scheme: string;
  /** Lower-case parameter names. */
  params: Record<string, string>;
}

const TOKEN = /^[!#$%&'*+.^_`|~0-9A-Za-z-]+/;

/** The challenges in one header value (several may be comma-separated); malformed tails are ignored. */
export function parseChallenges(header: string): Challenge[] {
  const out: Challenge[] = [];
  let s = header.trim();
  let current: Challenge | undefined;
  while (s.length > 0) {
    const word = TOKEN.exec(s)?.[0];
    if (!word) break;
    const after = s.slice(word.length).trimStart();
    if (after.startsWith('=') && current) {
      // a parameter of the current challenge
      let value: string;
      let rest = after.slice(1).trimStart();
      if (rest.startsWith('"')) {
        let i = 1;
        value = '';
        while (i < rest.length && rest[i] !== '"') {
          if (rest[i] === '\\' && i + 1 < rest.length) i++;
          value += rest[i];
          i++;
        }
        rest = rest.slice(i + 1);
      } else {
        value = TOKEN.exec(rest)?.[0] ?? '';
        rest = rest.slice(value.length);
      }
      current.params[word.toLowerCase()] = value;
      s = rest.trimStart().replace(/^,/, '').trimStart();
    } else {
      current = { scheme: word.toLowerCase(), params: {} };
      out.push(current);
      s = after.replace(/^,/, '').trimStart();
    }
  }
  return out;
}
