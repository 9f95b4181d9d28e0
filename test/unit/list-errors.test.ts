/**
 * A listing's failure quotes nothing the endpoint said: a store look-alike answers every list API (s3, gcs, abs) with
 * a planted secret-like line in its error body, in its error code and in a 2xx body that is not a page, and the
 * ListError (message, fields, cause) holds none of it; the status and a documented code are kept.
 */
import { createServer, type ServerResponse } from 'node:http';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { closeNow, listenOnLoopback } from '../support/ports.ts';
import { ListError, listPrefix } from '../../src/storage/list.ts';
import type { StorageCredentials } from '../../src/storage/credentials.ts';
import type { StorageLocation } from '../../src/storage/objecturl.ts';
import { redactDeep } from '../../src/redact.ts';

const PLANTED = ['AKIAPLANTEDMETADATA7', 'metadata-token-xyz'];
const LINE = `${PLANTED[0]} ${PLANTED[1]}`;

/** How the look-alike answers, by mode. */
const ANSWERS: Record<string, (res: ServerResponse) => void> = {
  // A provider-shaped error whose code and message are both planted.
  coded: (res) =>
    res
      .writeHead(403, { 'content-type': 'application/xml', 'x-ms-error-code': PLANTED[0]! })
      .end(`<?xml version="1.0"?><Error><Code>${PLANTED[0]}</Code><Message>${LINE}</Message></Error>`),
  // What a metadata service answers: a line of text.
  text: (res) => res.writeHead(404, { 'content-type': 'text/plain' }).end(`${LINE}\nsecond line`),
  json: (res) =>
    res.writeHead(403, { 'content-type': 'application/json' }).end(
      JSON.stringify({
        error: { code: 403, message: LINE, errors: [{ reason: PLANTED[1], message: LINE }] },
      }),
    ),
  // A 2xx that is no listing.
  ok: (res) => res.writeHead(200, { 'content-type': 'text/plain' }).end(`${LINE}\n`),
  // A documented code is kept.
  known: (res) =>
    res
      .writeHead(403, { 'content-type': 'application/xml', 'x-ms-error-code': 'SignatureDoesNotMatch' })
      .end(
        `<?xml version="1.0"?><Error><Code>SignatureDoesNotMatch</Code><Message>${LINE}</Message></Error>`,
      ),
};

let mode = 'text';
let url = '';
const server = createServer((req, res) => {
  req.resume();
  ANSWERS[mode]!(res);
});

beforeAll(async () => {
  url = await listenOnLoopback(server);
});
afterAll(() => closeNow(server));

const KINDS = ['s3', 'gcs', 'abs'] as const;

function target(kind: (typeof KINDS)[number]): [StorageLocation, StorageCredentials] {
  if (kind === 'abs')
    return [
      { type: 'abs', accountName: 'acct', container: 'c', endpoint: url },
      { type: 'abs', accountKey: Buffer.from('test-account-key-0123').toString('base64') },
    ];
  if (kind === 'gcs')
    return [
      { type: 'gcs', bucket: 'b', endpoint: url },
      { type: 'gcs', clientEmail: 'lister@p.iam.gserviceaccount.com', privateKey: 'unused' },
    ];
  return [
    { type: 's3', bucket: 'b', endpoint: url, pathStyle: true },
    { type: 's3', accessKeyID: 'AKIATESTKEYID0000001', secretAccessKey: 'test-secret-key-0123456789' },
  ];
}

async function failure(kind: (typeof KINDS)[number]): Promise<ListError> {
  const [location, credentials] = target(kind);
  const e = await listPrefix(location, credentials, 'm/', {
    requestTimeoutMs: 5_000,
    timeoutMs: 10_000,
  }).catch((x: unknown) => x);
  expect(e).toBeInstanceOf(ListError);
  return e as ListError;
}

describe("a listing's failure quotes nothing the endpoint said", () => {
  for (const m of ['coded', 'text', 'json', 'ok'])
    it.each(KINDS)(`%s, answered "${m}": the status and our words only`, async (kind) => {
      mode = m;
      const e = await failure(kind);
      expect(e.message).toMatch(
        new RegExp(`^cannot list ${kind} .*: (HTTP (200|403|404)|the request failed): `),
      );
      // Everything a log line would write of the error: message, fields, cause.
      const written = `${e.message}\n${JSON.stringify(redactDeep(e))}`;
      for (const p of PLANTED) expect(written).not.toContain(p);
      expect(written).not.toContain('second line');
    });

  it.each(['s3', 'abs'] as const)('%s: a documented error code is kept', async (kind) => {
    mode = 'known';
    const e = await failure(kind);
    expect(e.message).toContain('HTTP 403, SignatureDoesNotMatch: check the credentials');
    for (const p of PLANTED) expect(e.message).not.toContain(p);
  });

  it('a store that is not there says its transport code', async () => {
    const [location, credentials] = target('s3');
    const e = await listPrefix({ ...location, endpoint: 'http://127.0.0.1:9' }, credentials, 'm/').catch(
      (x: unknown) => x,
    );
    expect((e as Error).message).toMatch(/: ECONNREFUSED: the store was not reached/);
  });
});
