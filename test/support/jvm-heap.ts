/**
 * Heap growth of a JVM (TorchServe's frontend) while something runs: a full GC, then ONE long-running
 * `jstat -gc <pid> 200` (a sample every 200 ms, not a JVM spawned per sample), then a full GC again.
 * Run the JVM with the serial collector: its jstat counters are live, while G1 updates eden usage only at region
 * allocation or GC, which would hide short-lived garbage.
 */
import { execFile, spawn } from 'node:child_process';
import { promisify } from 'node:util';

const run = promisify(execFile);

export interface HeapGrowth {
  /** Heap used before, bytes. */
  base: number;
  /** Still used after the run and a full GC, minus base. */
  retained: number;
  /** Largest old-generation growth seen. */
  oldGrowth: number;
  /** Largest growth of used heap (young + old) seen. */
  peakGrowth: number;
  samples: number;
}

/** Heap figures from `jstat -gc` (KiB columns), in bytes. */
async function heap(pid: number): Promise<{ used: number; old: number }> {
  const { stdout } = await run('jstat', ['-gc', String(pid)]);
  const [head, values] = stdout.trim().split('\n');
  const cols = head!.trim().split(/\s+/);
  const vals = values!.trim().split(/\s+/).map(Number);
  const v = (name: string) => vals[cols.indexOf(name)]! * 1024;
  return { used: v('S0U') + v('S1U') + v('EU') + v('OU'), old: v('OU') };
}

export async function withHeapSampling<T>(
  pid: number,
  fn: () => Promise<T>,
): Promise<{ result: T; heap: HeapGrowth }> {
  await run('jcmd', [String(pid), 'GC.run']);
  const base = await heap(pid);
  const sampler = spawn('jstat', ['-gc', String(pid), '200'], { stdio: ['ignore', 'pipe', 'ignore'] });
  let peakOld = base.old;
  let peakUsed = base.used;
  let samples = 0;
  let cols: string[] = [];
  let pending = '';
  sampler.stdout.on('data', (chunk: Buffer) => {
    pending += chunk.toString();
    const lines = pending.split('\n');
    pending = lines.pop()!;
    for (const line of lines) {
      const f = line.trim().split(/\s+/);
      if (f[0] === 'S0C') {
        cols = f;
        continue;
      }
      if (cols.length === 0 || f.length !== cols.length) continue;
      const v = (name: string) => Number(f[cols.indexOf(name)]) * 1024;
      peakOld = Math.max(peakOld, v('OU'));
      peakUsed = Math.max(peakUsed, v('S0U') + v('S1U') + v('EU') + v('OU'));
      samples++;
    }
  });
  let result: T;
  try {
    result = await fn();
  } finally {
    sampler.kill();
  }
  await run('jcmd', [String(pid), 'GC.run']);
  const after = await heap(pid);
  return {
    result,
    heap: {
      base: base.used,
      retained: after.used - base.used,
      oldGrowth: peakOld - base.old,
      peakGrowth: peakUsed - base.used,
      samples,
    },
  };
}
