/**
 * `peerload fetch` as a process of its own (`node bin/peerload.js fetch …`), as each node runs its own agent: the
 * placements of several nodes in one bench process would share its one JavaScript thread, with each other and
 * with the bench's counting proxies in front of the origins, and a daemon whose response body is not drained for
 * 10 s fails its download (client 1.4.2 sends each finished piece to the proxy's stream with that time-out).
 */
import { spawn } from 'node:child_process';
import { join } from 'node:path';
import { createInterface } from 'node:readline';

const ROOT = join(import.meta.dirname, '..', '..');

/** Runs `peerload fetch <argv>`; resolves with its exit code and its stdout and stderr lines. */
export function peerloadFetchProcess(
  argv: string[],
): Promise<{ code: number; out: string[]; err: string[] }> {
  const child = spawn(process.execPath, [join(ROOT, 'bin/peerload.js'), 'fetch', ...argv], {
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  const out: string[] = [];
  const err: string[] = [];
  createInterface({ input: child.stdout }).on('line', (l) => out.push(l));
  createInterface({ input: child.stderr }).on('line', (l) => err.push(l));
  return new Promise((resolve, reject) => {
    child.once('error', reject);
    child.once('close', (code, signal) => resolve({ code: code ?? (signal ? 128 : 1), out, err }));
  });
}
