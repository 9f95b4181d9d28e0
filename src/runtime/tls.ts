/**
 * The serving certificate of the metrics endpoint: loaded from a directory holding `tls.crt` and `tls.key` (a
 * mounted `kubernetes.io/tls` Secret, e.g. cert-manager's, re-read when it changes), or a self-signed one made
 * at start when none is given, as controller-runtime's secure metrics server does.
 */
import { X509Certificate, createPrivateKey, generateKeyPairSync, randomBytes, sign } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { isIP } from 'node:net';
import { join } from 'node:path';

export interface CertificateKeyPair {
  /** PEM. */
  cert: string;
  /** PEM (PKCS#8). */
  key: string;
}

/** `tls.crt` and `tls.key` of `dir`, checked to belong together; the error names the file and the problem. */
export function loadCertificate(dir: string): CertificateKeyPair {
  const read = (name: string) => {
    try {
      return readFileSync(join(dir, name), 'utf8');
    } catch (err) {
      throw new Error(
        `${join(dir, name)}: ${(err as NodeJS.ErrnoException).code ?? (err as Error).message}`,
        {
          cause: err,
        },
      );
    }
  };
  const cert = read('tls.crt');
  const key = read('tls.key');
  let x509: X509Certificate;
  try {
    x509 = new X509Certificate(cert);
  } catch {
    throw new Error(`${join(dir, 'tls.crt')}: not a PEM certificate`);
  }
  let ok: boolean;
  try {
    ok = x509.checkPrivateKey(createPrivateKey(key));
  } catch {
    throw new Error(`${join(dir, 'tls.key')}: not a PEM private key`);
  }
  if (!ok) throw new Error(`${join(dir, 'tls.key')} is not the key of ${join(dir, 'tls.crt')}`);
  return { cert, key };
}

/**
 * A self-signed ECDSA P-256 server certificate for `names` (DNS names and IP addresses; the first is the common
 * name), valid from an hour ago for `days`.
 *
 * Hand-written DER because node:crypto makes keys and signatures and parses certificates but cannot build
 * one, and this one fixed shape (v3, one subject attribute, SAN, key usage, serverAuth) is about sixty lines
 * against an ASN.1 dependency in the operator image; node:crypto's X509Certificate checks the result (tested).
 */
export function selfSignedCertificate(names: string[], days = 365): CertificateKeyPair {
  if (names.length === 0) throw new Error('a certificate needs at least one name');
  const { publicKey, privateKey } = generateKeyPairSync('ec', { namedCurve: 'prime256v1' });
  const ecdsaWithSha256 = seq(oid('1.2.840.10045.4.3.2'));
  const name = seq(set(seq(oid('2.5.4.3'), tlv(0x0c, Buffer.from(names[0]!.slice(0, 64))))));
  const now = Date.now();
  const serial = randomBytes(16);
  serial[0] = (serial[0]! & 0x7f) | 0x40; // positive, no leading zero byte needed
  const altNames = names.map((n) => (isIP(n) ? tlv(0x87, ipBytes(n)) : tlv(0x82, Buffer.from(n, 'ascii'))));
  const extensions = tlv(
    0xa3,
    seq(
      seq(oid('2.5.29.17'), tlv(0x04, seq(...altNames))), // subjectAltName
      seq(oid('2.5.29.19'), tlv(0x01, Buffer.from([0xff])), tlv(0x04, seq())), // basicConstraints: not a CA
      seq(oid('2.5.29.15'), tlv(0x01, Buffer.from([0xff])), tlv(0x04, tlv(0x03, Buffer.from([0x07, 0x80])))), // keyUsage: digitalSignature
      seq(oid('2.5.29.37'), tlv(0x04, seq(oid('1.3.6.1.5.5.7.3.1')))), // extKeyUsage: serverAuth
    ),
  );
  const tbs = seq(
    tlv(0xa0, tlv(0x02, Buffer.from([2]))), // version 3
    tlv(0x02, serial),
    ecdsaWithSha256,
    name,
    seq(time(new Date(now - 3_600_000)), time(new Date(now + days * 86_400_000))),
    name,
    publicKey.export({ type: 'spki', format: 'der' }),
    extensions,
  );
  const signature = sign('sha256', tbs, privateKey); // DER ECDSA-Sig-Value
  const der = seq(tbs, ecdsaWithSha256, tlv(0x03, Buffer.concat([Buffer.from([0]), signature])));
  const body = der.toString('base64').replace(/.{1,64}/g, '$&\n');
  return {
    cert: `-----BEGIN CERTIFICATE-----\n${body}-----END CERTIFICATE-----\n`,
    key: privateKey.export({ type: 'pkcs8', format: 'pem' }) as string,
  };
}

function tlv(tag: number, body: Buffer): Buffer {
  const n = body.length;
  let len: Buffer;
  if (n < 0x80) len = Buffer.from([n]);
  else {
    const bytes: number[] = [];
    for (let v = n; v > 0; v = Math.floor(v / 256)) bytes.unshift(v % 256);
    len = Buffer.from([0x80 | bytes.length, ...bytes]);
  }
  return Buffer.concat([Buffer.from([tag]), len, body]);
}

const seq = (...parts: Buffer[]) => tlv(0x30, Buffer.concat(parts));
const set = (...parts: Buffer[]) => tlv(0x31, Buffer.concat(parts));

function oid(dotted: string): Buffer {
  const [a, b, ...rest] = dotted.split('.').map(Number) as [number, number, ...number[]];
  const out = [40 * a + b];
  for (const v of rest) {
    const base128 = [v & 0x7f];
    for (let x = v >>> 7; x > 0; x >>>= 7) base128.unshift((x & 0x7f) | 0x80);
    out.push(...base128);
  }
  return tlv(0x06, Buffer.from(out));
}

/** UTCTime before 2050, GeneralizedTime from then on (RFC 5280, 4.1.2.5). */
function time(d: Date): Buffer {
  const s = d.toISOString().replace(/[-:T]/g, '').slice(0, 14) + 'Z'; // YYYYMMDDHHMMSSZ
  return d.getUTCFullYear() < 2050 ? tlv(0x17, Buffer.from(s.slice(2))) : tlv(0x18, Buffer.from(s));
}

function ipBytes(ip: string): Buffer {
  if (isIP(ip) === 4) return Buffer.from(ip.split('.').map(Number));
  // IPv6: expand "::" then write eight 16-bit groups.
  const [head, tail] = ip.split('::') as [string, string | undefined];
  const h = head ? head.split(':') : [];
  const t = tail ? tail.split(':') : [];
  const groups = tail === undefined ? h : [...h, ...Array<string>(8 - h.length - t.length).fill('0'), ...t];
  const out = Buffer.alloc(16);
  groups.forEach((g, i) => out.writeUInt16BE(parseInt(g, 16), i * 2));
  return out;
}
