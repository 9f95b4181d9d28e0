import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import {
  DEFAULT_FILTERED_QUERY_PARAMS,
  canonicalURL,
  filterHeaders,
  identityFromHeaders,
  parseFilterHeaders,
  parsePieceLength,
  queryEscape,
  taskID,
} from '../../src/storage/taskid.ts';

interface Vector {
  url: string;
  filter: string[];
  tag: string | null;
  application: string | null;
  revision: string | null;
  pieceLength: number | null;
  canonicalURL?: string;
  taskID?: string;
}

const file = JSON.parse(readFileSync(new URL('../vectors/taskid.json', import.meta.url), 'utf8')) as {
  vectors: Vector[];
  queryEscape: { in: string; out: string }[];
};

const identity = (v: Vector) => ({
  url: v.url,
  filter: v.filter,
  tag: v.tag ?? undefined,
  application: v.application ?? undefined,
  revision: v.revision ?? undefined,
  pieceLength: v.pieceLength ?? undefined,
});

describe('task id vectors (shared with the Java plugin)', () => {
  it('holds every vector of peer-proxy.md', () => {
    // 6 canonical-URL rows + 11 task-id rows in the contract, plus 2 extra cases of the daemon's own tests.
    expect(file.vectors.length).toBeGreaterThanOrEqual(19);
    expect(file.vectors.filter((v) => v.canonicalURL !== undefined).length).toBeGreaterThanOrEqual(7);
    expect(file.vectors.filter((v) => v.taskID !== undefined).length).toBeGreaterThanOrEqual(11);
  });

  for (const v of file.vectors) {
    const label = `${v.url} filter=[${v.filter.join(',')}] tag=${v.tag} app=${v.application} rev=${v.revision} piece=${v.pieceLength}`;
    if (v.canonicalURL !== undefined) {
      it(`canonical URL: ${label}`, () => {
        expect(canonicalURL(v.url, v.filter)).toBe(v.canonicalURL);
      });
    }
    if (v.taskID !== undefined) {
      it(`task id: ${label}`, () => {
        expect(taskID(identity(v))).toBe(v.taskID);
      });
    }
  }

  for (const q of file.queryEscape) {
    it(`queryEscape(${JSON.stringify(q.in)}) = ${q.out}`, () => {
      expect(queryEscape(q.in)).toBe(q.out);
    });
  }
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
