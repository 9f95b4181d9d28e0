/**
 * Puts the latest results (bench/results/latest.json) into bench/README.md between the results markers:
 *   node_modules/.bin/node bench/tools/readme-table.ts [results.json]
 */
import { readFileSync, writeFileSync } from 'node:fs';
import { resolve } from 'node:path';
import { table, type Row } from '../lib/report.ts';

const ROOT = resolve(import.meta.dirname, '../..');
const file = resolve(process.argv[2] ?? `${ROOT}/bench/results/latest.json`);
const r = JSON.parse(readFileSync(file, 'utf8')) as {
  date: string;
  durationSeconds: number;
  options: Record<string, unknown>;
  machine: Record<string, unknown>;
  rows: Row[];
  errors: Record<string, string>;
  raw: Record<string, { s6?: { relativeToDiskRead?: Record<string, number> } }>;
};
const m = r.machine;
const rel = (r.raw['3+6'] ?? r.raw['6'])?.s6?.relativeToDiskRead;
const chart = rel
  ? [
      '',
      'Scenario 6, download time relative to reading the file from disk (out of the page cache), like the seed chart:',
      '',
      '```',
      ...Object.entries({
        'disk read': rel['disk']!,
        local: rel['local']!,
        ...(rel['localPageCached'] !== undefined ? { 'local (page-cached)': rel['localPageCached'] } : {}),
        direct: rel['direct']!,
        'P2P cold': rel['cold']!,
        remote: rel['remote']!,
      }).map(([k, v]) => `${k.padEnd(19)} ${'█'.repeat(Math.max(1, Math.round(v * 2)))} ${v.toFixed(1)}×`),
      '```',
    ]
  : [];
const section = [
  '<!-- results:start -->',
  `## Latest results (${r.date.slice(0, 16).replace('T', ' ')} UTC, ${Math.round(r.durationSeconds / 60)} min)`,
  '',
  `Machine: ${m['nproc']} vCPU (${m['cpuModel']}), ${m['memoryGiB']} GiB RAM, kernel ${m['kernel']}, Node ${m['node']}, ` +
    `${m['java']}; shared with other engineers' test runs (load average at start: ${String(m['loadavgAtStart']).split(' ').slice(0, 3).join(' ')}). ` +
    `Commit ${m['gitCommit']}${m['gitDirty'] ? ' + uncommitted changes' : ''}. Options: \`${JSON.stringify(r.options)}\`.`,
  '',
  table(r.rows),
  '',
  ...r.rows.filter((x) => x.notes).map((x) => `- **${x.id}**: ${x.notes}`),
  ...Object.entries(r.errors).map(([id, e]) => `- scenario ${id} did not complete: ${e.split('\n')[0]}`),
  ...chart,
  '<!-- results:end -->',
].join('\n');
const path = `${ROOT}/bench/README.md`;
const readme = readFileSync(path, 'utf8');
const start = readme.indexOf('<!-- results:start -->');
const end = readme.indexOf('<!-- results:end -->') + '<!-- results:end -->'.length;
if (start < 0 || end < start) throw new Error('results markers not found in bench/README.md');
writeFileSync(path, readme.slice(0, start) + section + readme.slice(end));
console.log(`bench/README.md updated from ${file}`);
