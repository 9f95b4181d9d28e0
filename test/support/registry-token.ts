/**
 * A token service for the real registry's Bearer flow (distribution's `auth.token`): `GET /token?service=…&scope=…`
 * with Basic credentials (or none) answers `{token, access_token, expires_in}`, a JWT signed with an ES256 key whose
 * public half the registry trusts through a JWKS file (`auth.token.jwks`). The registry verifies signature, issuer,
 * audience, expiry and the granted actions itself: this service only decides what to grant.
 *
 * Grants: a known user with the right password gets the actions it asked for (pull, push) on any repository; a
 * user in `noAccess` gets a token without them (the registry then refuses); anonymous gets `anonymousActions`
 * (default none); a wrong password is a 401 here.
 */
import { createPrivateKey, generateKeyPairSync, randomUUID, sign, type KeyObject } from 'node:crypto';
import { writeFile } from 'node:fs/promises';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';

export const TOKEN_SERVICE = 'peerload-test-registry';
export const TOKEN_ISSUER = 'peerload-test-token-issuer';

export interface TokenServerOptions {
  users: Record<string, string>;
  noAccess?: string[];
  anonymousActions?: string[];
  /** Token lifetime, s (default 300). */
  expiresIn?: number;
}

export interface TokenServer {
  /** The realm: `http://127.0.0.1:<port>/token`. */
  realm: string;
  /** Writes the JWKS the registry trusts; returns nothing. */
  writeJwks(path: string): Promise<void>;
  /** Every token request: who asked (undefined: anonymous), the scope, the answer's status. */
  requests: { user: string | undefined; scope: string | undefined; status: number }[];
  close(): Promise<void>;
}

const b64url = (b: Buffer | string) => Buffer.from(b).toString('base64url');

export async function startTokenServer(opts: TokenServerOptions): Promise<TokenServer> {
  const { privateKey, publicKey } = generateKeyPairSync('ec', { namedCurve: 'P-256' });
  const kid = randomUUID();
  const requests: TokenServer['requests'] = [];
  const key: KeyObject = createPrivateKey(privateKey.export({ format: 'pem', type: 'pkcs8' }));

  function jwt(sub: string, access: { type: string; name: string; actions: string[] }[]): string {
    const now = Math.floor(Date.now() / 1000);
    const header = b64url(JSON.stringify({ alg: 'ES256', typ: 'JWT', kid }));
    const claims = b64url(
      JSON.stringify({
        iss: TOKEN_ISSUER,
        sub,
        aud: TOKEN_SERVICE,
        exp: now + (opts.expiresIn ?? 300),
        nbf: now - 5,
        iat: now,
        jti: randomUUID(),
        access,
      }),
    );
    const signature = sign('sha256', Buffer.from(`${header}.${claims}`), { key, dsaEncoding: 'ieee-p1363' });
    return `${header}.${claims}.${b64url(signature)}`;
  }

  const server = createServer((req, res) => {
    const url = new URL(req.url ?? '/', 'http://x');
    const scopes = url.searchParams.getAll('scope');
    let user: string | undefined;
    const basic = /^Basic\s+(.+)$/i.exec(req.headers.authorization ?? '');
    const reply = (status: number, body: unknown) => {
      requests.push({ user, scope: scopes.join(' ') || undefined, status });
      res.writeHead(status, { 'content-type': 'application/json' }).end(JSON.stringify(body));
    };
    if (url.pathname !== '/token') return reply(404, { error: 'not found' });
    if (basic) {
      const decoded = Buffer.from(basic[1]!, 'base64').toString('utf8');
      const colon = decoded.indexOf(':');
      user = decoded.slice(0, colon);
      if (opts.users[user] === undefined || opts.users[user] !== decoded.slice(colon + 1))
        return reply(401, { errors: [{ code: 'UNAUTHORIZED', message: 'wrong user name or password' }] });
    }
    const access = scopes
      .flatMap((s) => s.split(' '))
      .map((s) => /^(repository):([^:]+):(.+)$/.exec(s))
      .filter((m) => m !== null)
      .map((m) => {
        const wanted = m[3]!.split(',');
        const granted =
          user === undefined
            ? wanted.filter((a) => (opts.anonymousActions ?? []).includes(a))
            : opts.noAccess?.includes(user)
              ? []
              : wanted;
        return { type: m[1]!, name: m[2]!, actions: granted };
      });
    const token = jwt(user ?? '', access);
    reply(200, {
      token,
      access_token: token,
      expires_in: opts.expiresIn ?? 300,
      issued_at: new Date().toISOString(),
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const port = (server.address() as AddressInfo).port;
  return {
    realm: `http://127.0.0.1:${port}/token`,
    requests,
    writeJwks: async (path) => {
      const jwk = publicKey.export({ format: 'jwk' });
      await writeFile(path, JSON.stringify({ keys: [{ ...jwk, kid, alg: 'ES256', use: 'sig' }] }));
    },
    close: () =>
      new Promise((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}
