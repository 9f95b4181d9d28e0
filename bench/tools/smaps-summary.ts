/**
 * Where a process's resident memory is, from a copy of its /proc/<pid>/smaps (s5 writes one with BENCH_PROFILE=1):
 *   node bench/tools/smaps-summary.ts <smaps file>
 * Resident (Rss) and private dirty KiB by kind of mapping: the executable and each library (file-backed), glibc's
 * main arena ([heap]), glibc's other arenas (anonymous reservations of exactly 64 MiB at 64 MiB boundaries: a
 * read-write head and a PROT_NONE tail), V8's code space (executable anonymous mappings), and the other anonymous
 * mappings by size (a V8 heap page is 256 KiB, but the kernel merges neighbouring mappings of the same protection,
 * so pages also hide among the larger ones; large objects and large mallocs are mmapped alone).
 */
import { readFileSync } from 'node:fs';

interface Mapping {
  start: bigint;
  end: bigint;
  perms: string;
  path: string;
  kib: Record<string, number>;
}

const file = process.argv[2];
if (!file) throw new Error('usage: smaps-summary.ts <smaps file>');

function parse(text: string): Mapping[] {
  const out: Mapping[] = [];
  for (const line of text.split('\n')) {
    const head = /^([0-9a-f]+)-([0-9a-f]+) (\S{4}) \S+ \S+ \d+\s*(.*)$/.exec(line);
    if (head) {
      out.push({
        start: BigInt(`0x${head[1]}`),
        end: BigInt(`0x${head[2]}`),
        perms: head[3]!,
        path: head[4]!.trim(),
        kib: {},
      });
      continue;
    }
    const field = /^(\w+):\s+(\d+) kB$/.exec(line);
    if (field && out.length) out.at(-1)!.kib[field[1]!] = Number(field[2]);
  }
  return out;
}

const ARENA = 64n << 20n;

/** The kind of each mapping; glibc arenas are recognised as a whole reservation (head and tail). */
function classify(maps: Mapping[]): string[] {
  const kinds = maps.map((m) => {
    if (m.path === '[heap]') return 'glibc main arena ([heap])';
    if (m.path.startsWith('[')) return m.path;
    if (m.path) return `file ${m.path.split('/').pop()}`;
    if (m.perms.includes('x')) return 'anonymous executable (V8 code)';
    return '';
  });
  for (let i = 0; i < maps.length; i++) {
    const m = maps[i]!;
    if (kinds[i] || m.start % ARENA !== 0n) continue;
    // The arena's used head (rw-p), then its PROT_NONE tail, together exactly 64 MiB.
    let end = m.end;
    let j = i;
    while (end - m.start < ARENA && maps[j + 1] && maps[j + 1]!.start === end && !maps[j + 1]!.path) {
      j++;
      end = maps[j]!.end;
    }
    if (end - m.start === ARENA && maps.slice(i, j + 1).some((x) => x.perms.startsWith('---'))) {
      for (let k = i; k <= j; k++) kinds[k] = 'glibc thread arenas (64 MiB reservations)';
    }
  }
  return kinds.map((k, i) => {
    if (k) return k;
    const m = maps[i]!;
    if (m.perms.startsWith('---')) return 'anonymous PROT_NONE (reserved, never resident)';
    const kib = Number((m.end - m.start) / 1024n);
    if (kib === 256) return 'anonymous 256 KiB (a V8 heap page each)';
    if (kib < 256) return 'anonymous < 256 KiB';
    if (kib <= 4096) return 'anonymous 256 KiB - 4 MiB';
    return 'anonymous > 4 MiB';
  });
}

const maps = parse(readFileSync(file, 'utf8'));
const kinds = classify(maps);
const rows = new Map<string, { n: number; size: number; rss: number; dirty: number; anon: number }>();
maps.forEach((m, i) => {
  const r = rows.get(kinds[i]!) ?? { n: 0, size: 0, rss: 0, dirty: 0, anon: 0 };
  r.n++;
  r.size += Number((m.end - m.start) / 1024n);
  r.rss += m.kib['Rss'] ?? 0;
  r.dirty += m.kib['Private_Dirty'] ?? 0;
  r.anon += m.kib['Anonymous'] ?? 0;
  rows.set(kinds[i]!, r);
});
const total = [...rows.values()].reduce((a, r) => a + r.rss, 0);
const mib = (kib: number) => (kib / 1024).toFixed(1).padStart(8);
console.log(
  `${'Rss MiB'.padStart(8)} ${'dirty'.padStart(8)} ${'anon'.padStart(8)} ${'mapped'.padStart(8)}  maps  kind`,
);
for (const [k, r] of [...rows].sort((a, b) => b[1].rss - a[1].rss)) {
  if (r.rss === 0 && r.size < 1024) continue;
  console.log(`${mib(r.rss)} ${mib(r.dirty)} ${mib(r.anon)} ${mib(r.size)} ${String(r.n).padStart(5)}  ${k}`);
}
console.log(`${mib(total)}  total Rss`);
