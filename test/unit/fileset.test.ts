import { describe, expect, it } from 'vitest';
import {
  DEFAULT_MAX_URLS_PER_JOB,
  FileSetError,
  fileSetEntries,
  normalisePrefix,
  pathProblem,
  planPreheatJobs,
  selectFiles,
  type ListedObject,
} from '../../src/storage/fileset.ts';
import type { StorageLocation } from '../../src/storage/objecturl.ts';
import { signObjectURL } from '../../src/storage/sign.ts';
import { taskID } from '../../src/storage/taskid.ts';

const LISTED: ListedObject[] = [
  { key: 'models/llama/', size: 0 },
  { key: 'models/llama/model-00002-of-00002.safetensors', size: 2000 },
  { key: 'models/llama/config.json', size: 10 },
  { key: 'models/llama/model-00001-of-00002.safetensors', size: 3000 },
  { key: 'models/llama/tokenizer/tokenizer.json', size: 50 },
  { key: 'models/llama/.cache/lock', size: 1 },
  { key: 'models/llama/README.md', size: 5 },
  { key: 'models/llama-other/x.bin', size: 7 },
];

function fileSetError(f: () => unknown): FileSetError {
  try {
    f();
  } catch (e) {
    if (e instanceof FileSetError) return e;
    throw e;
  }
  throw new Error('no FileSetError thrown');
}

describe('selectFiles', () => {
  it('keeps the files under the prefix (not a sibling prefix, not folder placeholders), sorted by path', () => {
    const files = selectFiles({ prefix: 'models/llama' }, LISTED);
    expect(files.map((f) => f.path)).toEqual([
      '.cache/lock',
      'README.md',
      'config.json',
      'model-00001-of-00002.safetensors',
      'model-00002-of-00002.safetensors',
      'tokenizer/tokenizer.json',
    ]);
    expect(files[2]).toEqual({ key: 'models/llama/config.json', path: 'config.json', size: 10 });
  });

  it('applies include, then exclude; ** does not match dot files', () => {
    const files = selectFiles(
      { prefix: 'models/llama/', include: ['**/*.json', '*.safetensors'], exclude: ['tokenizer/**'] },
      LISTED,
    );
    expect(files.map((f) => f.path)).toEqual([
      'config.json',
      'model-00001-of-00002.safetensors',
      'model-00002-of-00002.safetensors',
    ]);
    expect(
      selectFiles({ prefix: 'models/llama/', include: ['**/*'] }, LISTED).map((f) => f.path),
    ).not.toContain('.cache/lock');
  });

  it('refuses more files than maxFiles, naming the cap and the fix', () => {
    const e = fileSetError(() => selectFiles({ prefix: 'models/llama/', maxFiles: 3 }, LISTED));
    expect(e.field).toBe('maxFiles');
    expect(e.message).toBe(
      '6 files under prefix "models/llama/" match include/exclude, above maxFiles 3: narrow include/exclude or raise maxFiles',
    );
  });

  it('refuses more bytes than maxBytes, naming the cap and the fix', () => {
    const e = fileSetError(() => selectFiles({ prefix: 'models/llama/', maxBytes: 5000 }, LISTED));
    expect(e.field).toBe('maxBytes');
    expect(e.message).toContain(
      'hold 5066 bytes, above maxBytes 5000: narrow include/exclude or raise maxBytes',
    );
    expect(selectFiles({ prefix: 'models/llama/', maxBytes: 5066 }, LISTED)).toHaveLength(6);
  });

  it('says when nothing matches, and refuses bad caps', () => {
    const e = fileSetError(() => selectFiles({ prefix: 'models/llama/', include: ['*.gguf'] }, LISTED));
    expect(e.field).toBe('include');
    expect(e.message).toContain('no object under prefix "models/llama/" matches include/exclude (6 listed)');
    expect(fileSetError(() => selectFiles({ prefix: 'x/', maxFiles: 0 }, LISTED)).field).toBe('maxFiles');
    expect(fileSetError(() => selectFiles({ prefix: 'x/', maxBytes: 1.5 }, LISTED)).field).toBe('maxBytes');
  });

  it('refuses a key that cannot be a relative file path unless it is excluded', () => {
    const listed = [...LISTED, { key: 'models/llama/a/../../etc/passwd', size: 1 }];
    const e = fileSetError(() => selectFiles({ prefix: 'models/llama/' }, listed));
    expect(e.field).toBe('exclude');
    expect(e.message).toContain('"models/llama/a/../../etc/passwd"');
    expect(e.message).toContain('exclude it (exclude: ["a/../../etc/passwd"])');
    expect(selectFiles({ prefix: 'models/llama/', exclude: ['a/../../etc/passwd'] }, listed)).toHaveLength(6);
  });

  it('takes an explicit file list (no sizes), checking each path', () => {
    const files = selectFiles({ prefix: 'm/', files: ['b.bin', 'a/c.json'] });
    expect(files).toEqual([
      { key: 'm/a/c.json', path: 'a/c.json' },
      { key: 'm/b.bin', path: 'b.bin' },
    ]);
    const bad = fileSetError(() => selectFiles({ prefix: 'm/', files: ['ok', '../x'] }));
    expect(bad.field).toBe('files[1]');
    expect(fileSetError(() => selectFiles({ prefix: 'm/', files: ['a', 'a'] })).message).toContain('twice');
    expect(fileSetError(() => selectFiles({ prefix: 'm/', files: [] })).field).toBe('files');
  });

  it('normalises the prefix and rejects bad paths', () => {
    expect(normalisePrefix('')).toBe('');
    expect(normalisePrefix('a/b//')).toBe('a/b/');
    expect(() => normalisePrefix('/a')).toThrow(FileSetError);
    expect(pathProblem('a/b.bin')).toBeUndefined();
    for (const p of ['', '/a', 'a//b', './a', 'a/..', 'a\0b']) expect(pathProblem(p)).toBeDefined();
  });
});

describe('fileSetEntries', () => {
  const location: StorageLocation = {
    type: 's3',
    bucket: 'weights',
    endpoint: 'http://127.0.0.1:9000',
    pathStyle: true,
  };

  it('gives each file its object URL and the task id a signed download of it has', async () => {
    const files = selectFiles({ prefix: 'models/llama/', include: ['*.json'] }, LISTED);
    const [entry] = fileSetEntries(location, files, { tag: 't', rule: '1.4' });
    expect(entry!.url).toBe('http://127.0.0.1:9000/weights/models/llama/config.json');
    const signed = await signObjectURL(
      location,
      entry!.key,
      { type: 's3', accessKeyID: 'AKIAEXAMPLE', secretAccessKey: 'secret-example-key' },
      { expiresSeconds: 600, now: new Date('2026-01-01T00:00:00Z') },
    );
    // The daemon hashes the signed URL with the filter the download sends: the same id as the unsigned one.
    expect(taskID({ url: signed.url, filter: signed.filter, tag: 't', rule: '1.4' })).toBe(entry!.taskID);
  });

  it('uses the given filter instead of the location default', () => {
    const files = [{ key: 'k?x', path: 'k?x' }];
    const [a] = fileSetEntries(location, files);
    const [b] = fileSetEntries(location, files, { filter: [] });
    expect(a!.taskID).toMatch(/^[0-9a-f]{64}$/);
    expect(a!.url).toBe('http://127.0.0.1:9000/weights/k%3Fx');
    expect(b!.taskID).toBe(taskID({ url: a!.url, filter: [], rule: '1.4' }));
  });
});

describe('planPreheatJobs', () => {
  const files = (sizes: number[]) => sizes.map((size, i) => ({ url: `http://o/${i}`, size }));

  it('puts a directory into one job when it fits', () => {
    expect(planPreheatJobs(files([1, 2, 3]))).toHaveLength(1);
  });

  it('splits by URL count, every file once, in order', () => {
    const many = files(Array.from({ length: DEFAULT_MAX_URLS_PER_JOB * 2 + 1 }, () => 1));
    const jobs = planPreheatJobs(many);
    expect(jobs.map((j) => j.length)).toEqual([100, 100, 1]);
    expect(jobs.flat()).toEqual(many);
    expect(planPreheatJobs(files([1, 1, 1, 1, 1]), { maxURLsPerJob: 2 }).map((j) => j.length)).toEqual([
      2, 2, 1,
    ]);
  });

  it('splits by bytes; a file above the bound gets a job of its own', () => {
    const jobs = planPreheatJobs(files([4, 4, 10, 1, 1]), { maxBytesPerJob: 8 });
    expect(jobs.map((j) => j.map((f) => f.size))).toEqual([[4, 4], [10], [1, 1]]);
  });

  it('plans nothing for nothing and refuses a bad bound', () => {
    expect(planPreheatJobs([])).toEqual([]);
    expect(() => planPreheatJobs(files([1]), { maxURLsPerJob: 0 })).toThrow(/maxURLsPerJob/);
  });
});
