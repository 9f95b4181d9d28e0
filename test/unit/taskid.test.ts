import { readFileSync } from 'node:fs';
import { PEER_DAEMON_VERSION_PATTERN } from '../../src/api/modelpreheat.ts';
import { describe, expect, it } from 'vitest';
import {
  DEFAULT_FILTERED_QUERY_PARAMS,
  TASK_ID_RULES,
  canonicalURL,
  filterHeaders,
  identityFromHeaders,
  parseFilterHeaders,
  parsePieceLength,
  queryEscape,
  taskID,
  taskIdRule,
  type TaskIdRule,
} from '../../src/storage/taskid.ts';
import { TASKID_VECTORS, type TaskIdVector } from '../fixtures/taskid-vectors.ts';

type Vector = TaskIdVector;
const file = TASKID_VECTORS;

const identity = (v: Vector, rule: TaskIdRule) => ({
  url: v.url,
  filter: v.filter,
  tag: v.tag ?? undefined,
  application: v.application ?? undefined,
  revision: v.revision ?? undefined,
  pieceLength: v.pieceLength ?? undefined,
  rule,
});

describe('task id vectors (shared with the Java plugin)', () => {
  it("holds the daemon's own cases and the cases where the two daemon rules part", () => {
    // The daemon's own tests give 6 canonical-URL cases and 13 task-id cases (source 'daemon').
    expect(file.vectors.filter((v) => v.source === 'daemon').length).toBeGreaterThanOrEqual(19);
    const differ = file.vectors.filter((v) => v.expected['1.4'].taskID !== v.expected['1.5.3+'].taskID);
    expect(differ.length).toBeGreaterThanOrEqual(15);
    for (const v of file.vectors) expect(Object.keys(v.expected).sort()).toEqual([...TASK_ID_RULES].sort());
    // The cases the real 1.4.2 daemon is checked on: unsorted queries, ~, *, space, ;, %XX, tag/app/piece length.
    const urls = file.vectors.map((v) => v.url).join('\n');
    for (const needle of ['b=2&a=1', '~', '*', ' ', ';', '%7E', '%E4%B8%AD']) expect(urls).toContain(needle);
    expect(file.vectors.some((v) => v.tag && v.application && v.pieceLength && v.filter.length)).toBe(true);
  });

  for (const v of file.vectors) {
    const label = `${v.url} filter=[${v.filter.join(',')}] tag=${v.tag} app=${v.application} rev=${v.revision} piece=${v.pieceLength}`;
    for (const rule of TASK_ID_RULES) {
      it(`${rule}: ${label}`, () => {
        expect(canonicalURL(v.url, v.filter, rule)).toBe(v.expected[rule].canonicalURL);
        expect(taskID(identity(v, rule))).toBe(v.expected[rule].taskID);
      });
    }
  }

  for (const q of file.queryEscape) {
    it(`queryEscape(${JSON.stringify(q.in)}) = ${q.out}`, () => {
      expect(queryEscape(q.in)).toBe(q.out);
    });
  }
});

describe('daemon version -> task id rule', () => {
  it('takes the rule names and client versions compared with 1.5.3', () => {
    // A rule's own name stands for itself; a client below 1.5.3 takes 1.4, from 1.5.3 on 1.5.3+ (pre-release ignored).
    for (const v of ['1.4', '1.4.2', 'v1.4.2', '1.5', '1.5.2', '0.9.9']) expect(taskIdRule(v), v).toBe('1.4');
    for (const v of ['1.5.3+', '1.5.3', ' v1.5.3 ', '1.5.10', '1.6.0-rc.1', '2.0.0'])
      expect(taskIdRule(v), v).toBe('1.5.3+');
  });

  it('reads exactly what the CRD pattern of spec.peerDaemonVersion admits', () => {
    const pattern = new RegExp(PEER_DAEMON_VERSION_PATTERN);
    const samples = [
      '1.4',
      '1.5.3+',
      '1.4.2',
      'v1.5.3',
      '1.6.0-rc.1',
      '1.5.3+build.1',
      '1',
      'latest',
      '1.5.3++',
      'v1.x',
    ];
    for (const v of samples) expect(pattern.test(v), v).toBe(taskIdRule(v) !== undefined);
  });

  it('refuses anything else', () => {
    for (const bad of ['', 'latest', '1', '1.4.x', '>=1.5.3', '1.5.3++'])
      expect(taskIdRule(bad)).toBeUndefined();
  });

  it("defaults to the 1.5.3+ rule (the manager's) when no rule is given", () => {
    const url = 'https://example.com/f?b=2&a=1';
    expect(canonicalURL(url, ['x'])).toBe(canonicalURL(url, ['x'], '1.5.3+'));
    expect(taskID({ url, filter: ['x'] })).toBe(taskID({ url, filter: ['x'], rule: '1.5.3+' }));
    expect(taskID({ url, filter: ['x'] })).not.toBe(taskID({ url, filter: ['x'], rule: '1.4' }));
  });
});

describe('canonicalURL edge cases', () => {
  it('returns the URL untouched with an empty filter (not even parsed)', () => {
    expect(canonicalURL('https://EXAMPLE.com/a b?x=1', [])).toBe('https://EXAMPLE.com/a b?x=1');
  });

  it('sorts keys by UTF-8 bytes, keeps value order of one key, form-decodes + and %XX', () => {
    expect(canonicalURL('http://h/p?b=%41&a=2&b=1&c=x+y', ['z'])).toBe('http://h/p?a=2&b=A&b=1&c=x+y');
    // U+FFFD (3 UTF-8 bytes, EF ..) sorts before U+1F600 (F0 ..) by bytes, after it by UTF-16 units.
    expect(canonicalURL('http://h/?%F0%9F%98%80=1&%EF%BF%BD=2', ['z'])).toBe(
      'http://h/?%EF%BF%BD=2&%F0%9F%98%80=1',
    );
  });

  it('keeps a leading ? of a key and a key without =', () => {
    expect(canonicalURL('http://h/p??a=1&flag', ['z'])).toBe('http://h/p?%3Fa=1&flag=');
  });

  it('drops signature parameters so two signings of one object agree', () => {
    const a = 'http://s3.local/bucket/model.mar?X-Amz-Algorithm=AWS4&X-Amz-Date=20260101&X-Amz-Signature=aaa';
    const b = 'http://s3.local/bucket/model.mar?X-Amz-Algorithm=AWS4&X-Amz-Date=20260102&X-Amz-Signature=bbb';
    const filter = [...DEFAULT_FILTERED_QUERY_PARAMS];
    expect(canonicalURL(a, filter)).toBe('http://s3.local/bucket/model.mar');
    expect(taskID({ url: a, filter })).toBe(taskID({ url: b, filter }));
    expect(taskID({ url: a, filter: ['X-Amz-Date'] })).not.toBe(taskID({ url: b, filter: ['X-Amz-Date'] }));
  });

  it('throws on a URL that does not parse when filtering', () => {
    expect(() => canonicalURL(':error_url', ['x'])).toThrow(TypeError);
  });
});

describe('filter headers', () => {
  it('sends both dialects', () => {
    expect(filterHeaders(['Expires', 'Signature'])).toEqual({
      'X-Dragonfly-Filtered-Query-Params': 'Expires,Signature',
      'X-Dragonfly-Filter': 'Expires&Signature',
    });
  });

  it('reads the current header first, the legacy one otherwise, case-insensitively', () => {
    expect(
      parseFilterHeaders({ 'x-dragonfly-filtered-query-params': 'a, b', 'x-dragonfly-filter': 'c&d' }),
    ).toEqual(['a', 'b']);
    expect(parseFilterHeaders({ 'X-Dragonfly-Filter': 'c&d' })).toEqual(['c', 'd']);
    expect(parseFilterHeaders(new Headers({ 'X-Dragonfly-Filter': 'Expires&Signature' }))).toEqual([
      'Expires',
      'Signature',
    ]);
    expect(parseFilterHeaders({ accept: '*/*' })).toBeUndefined();
  });

  it('round-trips through filterHeaders', () => {
    const list = ['X-Amz-Signature', 'X-Amz-Date'];
    expect(parseFilterHeaders(filterHeaders(list))).toEqual(list);
  });

  it('derives a full identity from request headers, with the default filter as fall-back', () => {
    const id = identityFromHeaders('http://h/x?ns=docker.io', {
      'x-dragonfly-tag': 't',
      'x-dragonfly-application': 'app',
      'x-dragonfly-piece-length': '4mib',
    });
    expect(id).toMatchObject({ tag: 't', application: 'app', pieceLength: 4 * 1024 * 1024 });
    expect(canonicalURL(id.url, id.filter ?? [])).toBe('http://h/x');
  });

  it('parses piece lengths like the daemon', () => {
    expect(parsePieceLength('4194304')).toBe(4194304);
    expect(parsePieceLength('4MiB')).toBe(4194304);
    expect(parsePieceLength('4mb')).toBe(4_000_000);
    expect(parsePieceLength('lots')).toBeUndefined();
  });

  it("the Java plugin's copy of the daemon's default filter is the same list", () => {
    const java = readFileSync(
      new URL('../../plugin/src/main/java/io/peerload/plugin/TaskId.java', import.meta.url),
      'utf8',
    );
    const block = /daemon-default-filter:start([\s\S]*?)daemon-default-filter:end/.exec(java)?.[1];
    expect(block).toBeDefined();
    const names = [...block!.matchAll(/"([^"]+)"/g)].map((m) => m[1]);
    expect(names).toEqual([...DEFAULT_FILTERED_QUERY_PARAMS]);
  });
});
