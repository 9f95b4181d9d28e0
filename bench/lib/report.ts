/**
 * Rows of the benchmark table: median and spread over repetitions, the ratio to a reference measured in the same
 * run (paired per repetition), and PASS/FAIL against the target.
 */

export interface Stat {
  median: number;
  min: number;
  max: number;
  n: number;
  values: number[];
}

export function stat(values: number[]): Stat {
  const v = values.filter((x) => Number.isFinite(x));
  if (v.length === 0) return { median: NaN, min: NaN, max: NaN, n: 0, values: [] };
  const s = [...v].sort((a, b) => a - b);
  const mid = Math.floor(s.length / 2);
  const median = s.length % 2 ? s[mid]! : (s[mid - 1]! + s[mid]!) / 2;
  return { median, min: s[0]!, max: s[s.length - 1]!, n: s.length, values: v };
}

export function percentile(values: number[], p: number): number {
  if (values.length === 0) return NaN;
  const s = [...values].sort((a, b) => a - b);
  const i = Math.min(s.length - 1, Math.max(0, Math.ceil((p / 100) * s.length) - 1));
  return s[i]!;
}

export interface Row {
  id: string;
  scenario: string;
  /** What `value` measures, with its unit. */
  metric: string;
  unit: string;
  value: Stat;
  /** The reference measured in the same run (same unit). */
  reference?: Stat;
  referenceLabel?: string;
  /** value / reference, per repetition. */
  ratio?: Stat;
  target: string;
  /** undefined: informational row. */
  pass?: boolean;
  notes?: string;
}

const fmtNum = (x: number, unit: string): string => {
  if (!Number.isFinite(x)) return '—';
  const a = Math.abs(x);
  const digits = a >= 100 ? 0 : a >= 10 ? 1 : a >= 1 ? 2 : 3;
  return `${x.toFixed(digits)}${unit ? ` ${unit}` : ''}`;
};

export function fmtStat(s: Stat | undefined, unit: string): string {
  if (!s || s.n === 0) return '—';
  if (s.n === 1 || s.min === s.max) return `${fmtNum(s.median, unit)} (n=${s.n})`;
  return `${fmtNum(s.median, unit)} [${fmtNum(s.min, '')}–${fmtNum(s.max, '')}] (n=${s.n})`;
}

export function table(rows: Row[]): string {
  const head = [
    '#',
    'scenario',
    'metric',
    'peerload: median [min–max]',
    'reference',
    'ratio',
    'target',
    'result',
  ];
  const body = rows.map((r) => [
    r.id,
    r.scenario,
    r.metric,
    fmtStat(r.value, r.unit),
    r.reference ? `${fmtStat(r.reference, r.unit)}${r.referenceLabel ? ` ${r.referenceLabel}` : ''}` : '—',
    r.ratio ? fmtStat(r.ratio, '×') : '—',
    r.target,
    r.pass === undefined ? 'info' : r.pass ? 'PASS' : 'FAIL',
  ]);
  const esc = (s: string) => s.replaceAll('|', '\\|');
  return [
    `| ${head.join(' | ')} |`,
    `|${head.map(() => '---').join('|')}|`,
    ...body.map((c) => `| ${c.map(esc).join(' | ')} |`),
  ].join('\n');
}

export const MiB = 1024 * 1024;
export const GiB = 1024 * MiB;

export const sleep = (ms: number) => new Promise<void>((r) => setTimeout(r, ms));

/** Logs progress to stderr (stdout carries the table). */
export function progress(msg: string): void {
  process.stderr.write(`[bench ${new Date().toISOString().slice(11, 19)}] ${msg}\n`);
}

/** Runs `fn` over `items` with at most `limit` at once. */
export async function mapLimit<T, R>(
  items: readonly T[],
  limit: number,
  fn: (t: T, i: number) => Promise<R>,
): Promise<R[]> {
  const out = new Array<R>(items.length);
  let next = 0;
  const worker = async () => {
    while (next < items.length) {
      const i = next++;
      out[i] = await fn(items[i]!, i);
    }
  };
  await Promise.all(Array.from({ length: Math.max(1, Math.min(limit, items.length)) }, worker));
  return out;
}

/** Rejects after `ms` (bounds every wait of the benchmark). */
export async function within<T>(what: string, ms: number, p: Promise<T>): Promise<T> {
  let t: NodeJS.Timeout | undefined;
  try {
    return await Promise.race([
      p,
      new Promise<never>(
        (_, reject) => (t = setTimeout(() => reject(new Error(`${what}: no result within ${ms} ms`)), ms)),
      ),
    ]);
  } finally {
    clearTimeout(t);
  }
}

/** Polls `cond` every 10 ms until it holds; throws after `ms` (the loop stops either way). */
export async function until(what: string, ms: number, cond: () => boolean): Promise<void> {
  const deadline = performance.now() + ms;
  while (!cond()) {
    if (performance.now() > deadline) throw new Error(`${what}: not within ${ms} ms`);
    await sleep(10);
  }
}
