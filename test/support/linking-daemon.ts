/**
 * A peer daemon's proxy for tests of the hard-link paths: it answers every request with the bytes `serve` gives, and
 * links its cache file of them to the requested `X-Dragonfly-Output-Path`, reporting a local hit (the body need
 * not be read) or a task it is still filling.
 */
import { link, writeFile } from 'node:fs/promises';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { join } from 'node:path';

export interface Served {
  body: Buffer;
  finished: boolean;
  /** The connection is closed after this many bytes of the body. */
  cutAt?: number;
}

/**
 * A peer daemon that answers every blob with the bytes `serve` gives and links its cache file of them to the
 * requested output path: `finished` says whether it reports a local hit (body not read) or a task it is filling.
 */
export async function linkingDaemon(cache: string, serve: (asked: number) => Served) {
  let n = 0;
  const server = createServer((req, res) => {
    void (async () => {
      const { body, finished, cutAt } = serve(n);
      const file = join(cache, `task-${n++}`);
      await writeFile(file, body, { mode: 0o644 });
      const out = req.headers['x-dragonfly-output-path'];
      if (typeof out === 'string') await link(file, out);
      res.writeHead(200, {
        'x-dragonfly-task-id': 'b'.repeat(64),
        ...(finished ? { 'x-dragonfly-task-download-finished': 'true' } : {}),
        'content-length': body.length,
      });
      if (cutAt === undefined) res.end(body);
      else res.write(body.subarray(0, cutAt), () => setTimeout(() => res.destroy(), 20));
    })();
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  return {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
    close: () => new Promise<void>((r) => (server.closeAllConnections(), server.close(() => r()))),
  };
}
