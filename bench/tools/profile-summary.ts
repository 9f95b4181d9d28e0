/**
 * Summaries of the profiles written with BENCH_PROFILE=1 (bench/results/profiles/):
 *   node bench/tools/profile-summary.ts <file.heapsnapshot | file.cpuprofile> [top]
 * heap snapshot: self size by constructor/type (the live heap, what retains memory);
 * CPU profile: self time by function (file:line), and by file.
 */
import { readFileSync } from 'node:fs';

const [file, topArg, windowArg] = process.argv.slice(2);
/** CPU profiles: only the `windowArg` seconds before the first writeHeapSnapshot sample (the idle window of s5). */
const windowSeconds = windowArg ? Number(windowArg) : undefined;
if (!file) throw new Error('usage: profile-summary.ts <file> [top]');
const top = Number(topArg ?? 25);
const data = JSON.parse(readFileSync(file, 'utf8'));

const print = (m: Map<string, number>, unit: (v: number) => string, total: number) => {
  for (const [k, v] of [...m].sort((a, b) => b[1] - a[1]).slice(0, top))
    console.log(`${unit(v).padStart(12)} ${((v / total) * 100).toFixed(1).padStart(5)}%  ${k}`);
};

if (file.endsWith('.heapsnapshot')) {
  const meta = data.snapshot.meta;
  const fields: string[] = meta.node_fields;
  const types: string[] = meta.node_types[0];
  const n = fields.length;
  const iType = fields.indexOf('type');
  const iName = fields.indexOf('name');
  const iSize = fields.indexOf('self_size');
  const by = new Map<string, number>();
  const count = new Map<string, number>();
  let total = 0;
  for (let i = 0; i < data.nodes.length; i += n) {
    const type = types[data.nodes[i + iType]]!;
    const name =
      type === 'object' || type === 'closure' ? String(data.strings[data.nodes[i + iName]]) : `(${type})`;
    const size = data.nodes[i + iSize] as number;
    total += size;
    by.set(name, (by.get(name) ?? 0) + size);
    count.set(name, (count.get(name) ?? 0) + 1);
  }
  console.log(
    `live heap (sum of self sizes): ${(total / 2 ** 20).toFixed(1)} MiB, ${data.nodes.length / n} nodes`,
  );
  print(by, (v) => `${(v / 2 ** 20).toFixed(2)} MiB`, total);
  // How many of each: a leak is a count that grows with time, not with the objects cached.
  console.log('\nby count:');
  for (const [k, v] of [...count].sort((a, b) => b[1] - a[1]).slice(0, top))
    console.log(`${String(v).padStart(12)}  ${k} (${((by.get(k) ?? 0) / 2 ** 20).toFixed(2)} MiB)`);
} else {
  const nodes = data.nodes as {
    id: number;
    callFrame: { functionName: string; url: string; lineNumber: number };
    hitCount?: number;
  }[];
  const dt = (data.endTime - data.startTime) / Math.max(1, data.samples.length);
  const byFn = new Map<string, number>();
  const byFile = new Map<string, number>();
  let total = 0;
  let hitsOf = (nd: { id: number; hitCount?: number }) => nd.hitCount ?? 0;
  if (windowSeconds !== undefined) {
    const snapIds = new Set(
      nodes.filter((nd) => nd.callFrame.functionName === 'writeHeapSnapshot').map((nd) => nd.id),
    );
    const times: number[] = [];
    let t = data.startTime as number;
    for (const d of data.timeDeltas as number[]) times.push((t += d));
    const samples = data.samples as number[];
    const firstSnap = samples.findIndex((id) => snapIds.has(id));
    const end = firstSnap >= 0 ? times[firstSnap]! : times[times.length - 1]!;
    const counts = new Map<number, number>();
    samples.forEach((id, i) => {
      if (times[i]! < end && times[i]! >= end - windowSeconds * 1e6)
        counts.set(id, (counts.get(id) ?? 0) + 1);
    });
    hitsOf = (nd) => counts.get(nd.id) ?? 0;
    console.log(`window: the ${windowSeconds} s before the heap snapshot`);
  }
  for (const nd of nodes) {
    const hits = hitsOf(nd);
    if (!hits) continue;
    const f = nd.callFrame;
    const url = f.url.replace(/^file:\/\/.*?\/(node_modules|src|test)\//, '$1/');
    const key = `${f.functionName || '(anonymous)'} ${url}:${f.lineNumber + 1}`;
    byFn.set(key, (byFn.get(key) ?? 0) + hits);
    byFile.set(url || f.functionName, (byFile.get(url || f.functionName) ?? 0) + hits);
    total += hits;
  }
  console.log(`samples ${total}, ~${((total * dt) / 1e6).toFixed(1)} s sampled`);
  console.log('-- by function (self)');
  print(byFn, (v) => `${((v * dt) / 1000).toFixed(0)} ms`, total);
  console.log('-- by file (self)');
  print(byFile, (v) => `${((v * dt) / 1000).toFixed(0)} ms`, total);
}
