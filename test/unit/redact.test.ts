import { afterEach, describe, expect, it } from 'vitest';
import {
  forgetSecrets,
  redact,
  redactBounded,
  redactDeep,
  redactURL,
  redactURLs,
  MAX_REDACTED_INPUT,
  rememberSecret,
  rememberSecretData,
} from '../../src/redact.ts';
import { MAX_DETAIL, boundDetail } from '../../src/http/errors.ts';
import { capturedLogger } from '../support/runtime-harness.ts';

afterEach(() => forgetSecrets());

describe('redactURL', () => {
  it('keeps scheme, host, port and path; drops userinfo and fragment; keeps parameter names only', () => {
    expect(
      redactURL(
        'https://AKIA:pw@models.s3.amazonaws.com:443/a/m.mar?X-Amz-Credential=AKIAX%2F2026&X-Amz-Signature=abc&flag#frag',
      ),
    ).toBe('https://models.s3.amazonaws.com:443/a/m.mar?X-Amz-Credential=***&X-Amz-Signature=***&flag');
    expect(redactURL('http://admin:secret@10.0.0.7:8081')).toBe('http://10.0.0.7:8081');
  });

  it('leaves a URL with nothing to drop byte for byte as written', () => {
    for (const u of ['http://198.18.0.1:8081', 'http://[fd00::1]:8081/', 'https://x/y/%2e%2E/z'])
      expect(redactURL(u)).toBe(u);
  });

  it('an @ in the path is not userinfo', () => {
    expect(redactURL('https://host/a@b/c')).toBe('https://host/a@b/c');
  });
});

describe('redact (text)', () => {
  it('redacts every URL inside a message, whatever surrounds it', () => {
    const text =
      'download failed: GET "https://b.s3.amazonaws.com/k?X-Amz-Security-Token=TOKEN123&X-Amz-Signature=SIG456": 403; ' +
      'peer http://u:p4ss@10.0.0.1:4001/x?q=1, and https://h/p?a=1\\u0026b=2';
    const out = redact(text);
    for (const secret of ['TOKEN123', 'SIG456', 'p4ss', 'q=1', 'a=1', 'b=2'])
      expect(out).not.toContain(secret);
    expect(out).toContain('https://b.s3.amazonaws.com/k?X-Amz-Security-Token=***&X-Amz-Signature=***');
    expect(out).toContain('http://10.0.0.1:4001/x?q=***');
  });

  it('replaces given and remembered secrets, the longest first', () => {
    rememberSecret('short-secret');
    rememberSecret('short-secret-and-more');
    expect(redact('x short-secret-and-more y short-secret z tok-9999', ['tok-9999'])).toBe(
      'x *** y *** z ***',
    );
  });

  it('remembers the key fields of a JSON secret (a key file, a service account), not its ordinary fields', () => {
    rememberSecret(JSON.stringify({ management: { key: 'mgmt-key-1' }, API: { key: 'api-key-22' } }));
    rememberSecret(
      JSON.stringify({
        private_key: '-----BEGIN PRIVATE KEY-----xyz',
        token_uri: 'https://oauth2.googleapis.com/token',
      }),
    );
    expect(redact('rejected mgmt-key-1 then api-key-22')).toBe('rejected *** then ***');
    expect(redact('pem -----BEGIN PRIVATE KEY-----xyz')).toBe('pem ***');
    expect(redact('https://oauth2.googleapis.com/token')).toBe('https://oauth2.googleapis.com/token');
  });

  it('does not mangle ordinary words with short remembered values (a user name, a region)', () => {
    rememberSecret('root');
    rememberSecret('us-east');
    expect(redact('rootfs in us-east-1')).toBe('rootfs in us-east-1');
    expect(redact('token abcd', ['abcd'])).toBe('token ***');
  });
});

describe('redactDeep', () => {
  it('redacts every string of a status, keys untouched, other values kept', () => {
    rememberSecret('planted-value');
    const status = {
      successTasks: [{ url: 'https://h/k?Signature=S1', hostname: 'planted-value', ip: '10.0.0.1' }],
      successCount: 3,
      ok: true,
      conditions: [{ type: 'Succeeded', message: 'failed: http://a:b@h:1/x' }],
    };
    expect(redactDeep(status)).toEqual({
      successTasks: [{ url: 'https://h/k?Signature=***', hostname: '***', ip: '10.0.0.1' }],
      successCount: 3,
      ok: true,
      conditions: [{ type: 'Succeeded', message: 'failed: http://h:1/x' }],
    });
  });
});

describe('the logger', () => {
  it('redacts messages, fields and errors at every level', async () => {
    rememberSecret('log-secret-1');
    const { logger: log, lines, text } = capturedLogger('debug');
    log.debug({ url: 'https://h/x?X-Amz-Signature=SIGDEBUG' }, 'got log-secret-1');
    log.warn({ err: new Error('reach http://u:pw-777@h:1 failed') }, 'failure');
    log.info('plain https://h/y?token=TOK888');
    await new Promise((r) => setImmediate(r));
    const all = text();
    expect(lines).toHaveLength(3);
    for (const s of ['SIGDEBUG', 'log-secret-1', 'pw-777', 'TOK888']) expect(all).not.toContain(s);
    expect(all).toContain('https://h/x?X-Amz-Signature=***');
  });
});

describe('redaction closes its gaps', () => {
  it('redacts before it cuts: no first characters of a secret survive a bound', () => {
    rememberSecret('straddling-secret-0123');
    for (let pad = MAX_DETAIL - 20; pad <= MAX_DETAIL; pad++) {
      const text = `${'x'.repeat(pad)} straddling-secret-0123 tail`;
      const out = boundDetail(text);
      expect(out.length).toBeLessThanOrEqual(MAX_DETAIL + 1);
      expect(out).not.toMatch(/ str/);
    }
    expect(redactBounded('token given-tok-99 end', 12, ['given-tok-99'])).toBe('token *** en…');
    // A URL's query cut in the middle is still recognised as one: it was redacted first.
    expect(redactBounded(`${'y'.repeat(40)} https://h/k?X-Amz-Signature=abcdef0123456789`, 64)).not.toContain(
      'abc',
    );
  });

  it('JSON-escaped, \\u0026-escaped and percent-encoded forms of remembered and given values', () => {
    const pem = '-----BEGIN KEY-----\nMIIEpAIB"quoted"\\back\n-----END KEY-----';
    const amp = 'tok&en<abc>12';
    const pct = 'p@ss/word+1 x!';
    rememberSecretData('ns/keys', { 'tls.key': pem, token: amp, password: pct });
    const texts = [
      JSON.stringify({ key: pem }),
      'body {"token":"tok\\u0026en\\u003cabc\\u003e12"}',
      `q=${encodeURIComponent(pct)}`,
      'q=p%40ss%2Fword%2B1+x%21',
      'q=p%40ss%2fword%2b1%20x!',
    ];
    for (const t of texts) {
      const out = redact(t);
      expect(out, t).toContain('***');
      for (const fragment of ['MIIEpAIB', 'u0026', 'abc', 'word']) expect(out, t).not.toContain(fragment);
    }
    expect(redact('given: c2VjcmV0%2Bgiven%3D', ['c2VjcmV0+given='])).toBe('given: ***');
  });

  it('short values of secret-named keys are redacted where they stand alone; other short values are not', () => {
    rememberSecretData('ns/login', {
      username: 'admin1',
      password: 'hunter2',
      api_key: 'k3y9',
      region: 'eu-1',
    });
    expect(redact('login admin1 / hunter2 with k3y9 in eu-1')).toBe('login admin1 / *** with *** in eu-1');
    expect(redact('hunter22 and xk3y9 are other words')).toBe('hunter22 and xk3y9 are other words');
    expect(redact('{"password":"hunter2"} p=hunter2&x')).toBe('{"password":"***"} p=***&x');
  });

  it('class instances in logs: Error subclasses with fields and causes, toJSON objects, plain classes', async () => {
    rememberSecret('class-secret-value-1');
    class DetailedError extends Error {
      detail = 'server said class-secret-value-1';
      constructor() {
        super('request failed', { cause: new Error('inner class-secret-value-1') });
        this.name = 'DetailedError';
      }
    }
    class Credentials {
      user = 'u';
      secret = 'class-secret-value-1';
    }
    const withToJSON = { toJSON: () => ({ echoed: 'class-secret-value-1' }) };
    const cyclic: Record<string, unknown> = { note: 'class-secret-value-1' };
    cyclic['self'] = cyclic;
    const { logger: log, lines, text } = capturedLogger('info');
    log.error({ err: new DetailedError() }, 'one');
    log.warn({ creds: new Credentials(), reply: withToJSON, cyclic }, 'two');
    log.info({ url: new URL('https://h/x?X-Amz-Signature=URLSIG1') }, 'three');
    log.error(new DetailedError(), 'four');
    await new Promise((r) => setImmediate(r));
    const all = text();
    expect(lines).toHaveLength(4);
    expect(all).not.toContain('class-secret-value-1');
    expect(all).not.toContain('URLSIG1');
    expect(all).toContain('server said ***');
    expect(all).toContain('inner ***');
  });
});

/** The least time of `runs` calls of `f`, ms: the least is the one least disturbed by other work on the machine. */
function leastTime(f: () => unknown, runs = 15): number {
  let least = Infinity;
  for (let i = 0; i < runs; i++) {
    const t = performance.now();
    f();
    least = Math.min(least, performance.now() - t);
  }
  return least;
}

/** How many times longer `large` takes than `small`, each at its least over 7 runs (a floor of 0.05 ms). */
const timeRatio = (large: () => unknown, small: () => unknown) =>
  leastTime(large, 7) / Math.max(leastTime(small, 7), 0.05);

describe('redaction is linear in its input and reads a bounded prefix', () => {
  const pathological = (n: number) => [
    'a'.repeat(n) + '://',
    '://'.repeat(Math.floor(n / 3)),
    ('a'.repeat(97) + '://').repeat(Math.floor(n / 100)),
    'a:/'.repeat(Math.floor(n / 3)),
    'http://' + 'a'.repeat(n),
    ('1+.-' + '://x ').repeat(Math.floor(n / 10)),
  ];

  it('finds URLs reading each character a bounded number of times: ten times the text, ten times the reads', () => {
    // The old expression read the square: 100 times as much for ten times `a…a://`.
    const smalls = pathological(100_000);
    const larges = pathological(1_000_000);
    for (const [i, small] of smalls.entries()) {
      const large = larges[i]!;
      const s = { count: 0 };
      const l = { count: 0 };
      redactURLs(small, s);
      redactURLs(large, l);
      expect(l.count, `input ${i}`).toBeLessThanOrEqual(3 * large.length);
      expect(l.count / s.count, `input ${i}`).toBeLessThan(12);
    }
  });

  it('finds URLs in time that grows about linearly (generous bound: the machine is shared)', () => {
    const small = 'a'.repeat(100_000) + '://';
    const large = 'a'.repeat(1_000_000) + '://';
    redactURLs(small); // compiled before it is timed
    redactURLs(large);
    const ratio = timeRatio(
      () => redactURLs(large),
      () => redactURLs(small),
    );
    // Linear is about 10; the old expression's square was 100.
    expect(ratio).toBeLessThan(50);
  });

  it('finds the same URLs as before', () => {
    expect(redactURLs('see http://u:p@h/x?a=1 and 1abc://h?t=2 not ://x nor a:// ')).toBe(
      'see http://h/x?a=*** and 1abc://h?t=*** not ://x nor a:// ',
    );
    expect(redactURLs('x<https://h/?s=1>"s3://b/k?sig=2"')).toBe('x<https://h/?s=***>"s3://b/k?sig=***"');
    expect(redactURLs('http://a/?q=1http://b/?r=2')).toBe('http://a/?q=***');
  });

  it('redacts a 1 MB body of a and :// no slower than its bounded prefix, and says it cut', () => {
    const body = 'a'.repeat(1e6) + '://';
    const r = redact(body);
    // One token with no end inside the prefix: nothing of it is kept.
    expect(r).toBe('…');
    const prefix = body.slice(0, 100_000);
    expect(
      timeRatio(
        () => redact(body),
        () => redact(prefix),
      ),
    ).toBeLessThan(5);
    for (const text of pathological(1_000_000)) {
      const out = redact(text);
      expect(out.length).toBeLessThanOrEqual(MAX_REDACTED_INPUT + 1);
    }
  });

  it('cuts before a secret, a URL or a token that the bound would split', () => {
    const secret = 'S3cr3tKeyWith Space-and-more-0123456789';
    const filler = 'x '.repeat(MAX_REDACTED_INPUT / 2 - 10);
    // The secret straddles the bound: none of it is kept, not even the part before its space.
    const text = filler + secret + ' tail '.repeat(100);
    const out = redact(text, [secret]);
    expect(out.endsWith('…')).toBe(true);
    expect(out).not.toContain('S3cr3t');
    expect(out.length).toBeLessThan(MAX_REDACTED_INPUT);
    // A URL cut by the bound would keep its userinfo: it goes whole.
    const url = 'http://user:password@h/p?sig=' + 'z'.repeat(100);
    const out2 = redact(filler + url + ' after'.repeat(100));
    expect(out2).not.toContain('user');
    expect(out2).not.toContain('password');
    expect(out2).not.toContain('zzz');
    // Text within the bound is redacted as it was, not cut.
    expect(redact('a'.repeat(1000) + ' http://u:p@h/')).toBe('a'.repeat(1000) + ' http://h/');
    // A remembered PEM key, cut in its middle by the bound, leaves none of its lines.
    const pem =
      '-----BEGIN PRIVATE KEY-----\n' +
      'MIIEvQIBADANBgkqhkiG9w0BAQEFAASC\n'.repeat(40) +
      '-----END PRIVATE KEY-----';
    rememberSecret(pem);
    const out3 = redact('y '.repeat(MAX_REDACTED_INPUT / 2 - 500) + pem + '\n'.repeat(2000));
    expect(out3).not.toContain('MIIEvQ');
  });

  it('redactBounded on a huge body: redacted, bounded, fast', () => {
    const r = redactBounded('token=' + 'a'.repeat(1e6) + '://' + ' http://h/?s=1'.repeat(1e5), 1024);
    expect(r.length).toBeLessThanOrEqual(1025);
  });
});
