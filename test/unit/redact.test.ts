import { afterEach, describe, expect, it } from 'vitest';
import { Writable } from 'node:stream';
import {
  forgetSecrets,
  redact,
  redactBounded,
  redactDeep,
  redactURL,
  rememberSecret,
  rememberSecretData,
} from '../../src/redact.ts';
import { MAX_DETAIL, boundDetail } from '../../src/http/errors.ts';
import { createLogger } from '../../src/runtime/logger.ts';

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
    const lines: string[] = [];
    const sink = new Writable({
      write(chunk, _enc, done) {
        lines.push(String(chunk));
        done();
      },
    });
    const log = createLogger('debug', sink);
    log.debug({ url: 'https://h/x?X-Amz-Signature=SIGDEBUG' }, 'got log-secret-1');
    log.warn({ err: new Error('reach http://u:pw-777@h:1 failed') }, 'failure');
    log.info('plain https://h/y?token=TOK888');
    await new Promise((r) => setImmediate(r));
    const all = lines.join('');
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
    const lines: string[] = [];
    const sink = new Writable({
      write(chunk, _enc, done) {
        lines.push(String(chunk));
        done();
      },
    });
    const log = createLogger('info', sink);
    log.error({ err: new DetailedError() }, 'one');
    log.warn({ creds: new Credentials(), reply: withToJSON, cyclic }, 'two');
    log.info({ url: new URL('https://h/x?X-Amz-Signature=URLSIG1') }, 'three');
    log.error(new DetailedError(), 'four');
    await new Promise((r) => setImmediate(r));
    const all = lines.join('');
    expect(lines).toHaveLength(4);
    expect(all).not.toContain('class-secret-value-1');
    expect(all).not.toContain('URLSIG1');
    expect(all).toContain('server said ***');
    expect(all).toContain('inner ***');
  });
});
