/**
 * Development servers: a peer proxy, an OCI registry stand-in, a small file origin and a manager emulator whose
 * preheat jobs download through that peer proxy. A dev tool, not product code.
 *
 *   node test/support/dev-servers.ts [--manager-port 8080] [--proxy-port 4001] [--registry-port 5000]
 *        [--origin-port 9000] [--api-auth none|jwt] [--token <PAT for /oapi/v1>] [--status-field state|status]
 *        [--job-latency-ms 0] [--json]
 *
 * Ports default to 0 (free ports). Prints the URLs (and, with --json, one JSON line), then runs until SIGINT /
 * SIGTERM. With --api-auth jwt, sign in as root / dragonfly.
 */
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { parseArgs } from 'node:util';
import { startManagerEmulator } from './manager-emulator.ts';
import { startOciRegistry } from './oci-registry.ts';
import { startPeerProxy } from './peer-proxy.ts';
import { loopbackOperatorFlags } from './loopback-profile.ts';

const { values } = parseArgs({
  options: {
    'manager-port': { type: 'string', default: '0' },
    'proxy-port': { type: 'string', default: '0' },
    'registry-port': { type: 'string', default: '0' },
    'origin-port': { type: 'string', default: '0' },
    'api-auth': { type: 'string', default: 'none' },
    token: { type: 'string', multiple: true, default: [] },
    'status-field': { type: 'string', default: 'state' },
    'job-latency-ms': { type: 'string', default: '0' },
    json: { type: 'boolean', default: false },
  },
});

const apiAuth = values['api-auth'] === 'jwt' ? 'jwt' : 'none';
const statusField = values['status-field'] === 'status' ? 'status' : 'state';

/** A dumb object store: GET /<anything> answers deterministic bytes (size from `?size=`, default 1 MiB). */
const origin = createServer((req, res) => {
  const u = new URL(req.url ?? '/', 'http://origin');
  const size = Math.min(Number(u.searchParams.get('size') ?? 1048576) || 1048576, 1024 ** 3);
  res.writeHead(200, { 'content-type': 'application/octet-stream', 'content-length': size });
  const chunk = Buffer.alloc(64 * 1024, u.pathname.length % 256);
  let sent = 0;
  const pump = () => {
    while (sent < size) {
      const n = Math.min(chunk.length, size - sent);
      sent += n;
      if (!res.write(n === chunk.length ? chunk : chunk.subarray(0, n))) return void res.once('drain', pump);
    }
    res.end();
  };
  pump();
});
await new Promise<void>((r) => origin.listen(Number(values['origin-port']), '127.0.0.1', r));
const originURL = `http://127.0.0.1:${(origin.address() as AddressInfo).port}`;

const peer = await startPeerProxy({ port: Number(values['proxy-port']) });
const registry = await startOciRegistry({ port: Number(values['registry-port']) });
const image = registry.pushImage('library/demo-model', 'v1', { platforms: ['linux/amd64', 'linux/arm64'] });
const manager = await startManagerEmulator({
  port: Number(values['manager-port']),
  peer,
  apiAuth,
  statusField,
  tokens: values.token,
  jobLatencyMs: Number(values['job-latency-ms']),
});

// An operator for these servers takes the loopback profile: they listen on 127.0.0.1, which its defaults refuse.
const operatorCommand = [
  'peerload operator --kubeconfig $KUBECONFIG --no-leader-elect',
  `--manager-url ${manager.url}`,
  ...loopbackOperatorFlags().map((f) => (f.startsWith('--') ? f : `'${f}'`)),
]
  .join(' ')
  .replace(/ '/g, "='")
  .replace(/(--[a-z-]+)='/g, "$1='");

const info = {
  operatorCommand,
  manager: manager.url,
  peerProxy: peer.url,
  registry: registry.url,
  origin: originURL,
  sampleImageManifest: image.manifestURL,
  sampleFile: `${originURL}/models/demo.mar?size=1048576`,
  apiAuth,
  tokens: values.token.length,
};
if (values.json) {
  console.log(JSON.stringify(info));
} else {
  console.log(
    `manager emulator  ${info.manager}  (/api/v1 auth: ${apiAuth}${apiAuth === 'jwt' ? ', root/dragonfly' : ''}; /oapi/v1: ${info.tokens} token(s))`,
  );
  console.log(`peer proxy        ${info.peerProxy}`);
  console.log(`OCI registry      ${info.registry}  sample image ${info.sampleImageManifest}`);
  console.log(`file origin       ${info.origin}    sample file  ${info.sampleFile}`);
  console.log(`an operator for them:\n  ${operatorCommand}`);
  console.log('Ctrl-C to stop.');
}

let stopping = false;
const shutdown = async () => {
  if (stopping) return;
  stopping = true;
  await manager.close();
  await registry.close();
  await peer.close();
  origin.closeAllConnections();
  await new Promise<void>((r) => origin.close(() => r()));
  process.exit(0);
};
process.on('SIGINT', () => void shutdown());
process.on('SIGTERM', () => void shutdown());
