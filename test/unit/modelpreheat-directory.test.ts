/**
 * The pure parts of directory preheats (spec.objectStorage.prefix, ServedModel spec.files): the schema's rules,
 * the owned preheat of a directory, each file's task id (the same as the jobs' requests give), which chunks need a
 * job in an attempt, the failed files by path, the bounded status, how failures read, and the drivers' layouts.
 */
import { describe, expect, it } from 'vitest';
import {
  ModelPreheatSpec,
  ModelPreheatStatus,
  ServedModelSpec,
  ownedPreheatSpec,
  type ModelPreheat,
} from '../../src/api/index.ts';
import {
  chunksToCreate,
  directorySucceededStatus,
  failedFiles,
  jobsCreatedStatus,
  runningState,
} from '../../src/controllers/modelpreheat/directory-decide.ts';
import {
  DirectoryListings,
  directoryChunks,
  directoryTasks,
  listingDigest,
  operatorLister,
  pathsByURL,
} from '../../src/controllers/modelpreheat/directory.ts';
import { describeFailure, LISTING_TIMED_OUT_RETRY_MS } from '../../src/controllers/modelpreheat/failures.ts';
import { ModelDirectories, modelFiles } from '../../src/controllers/servedmodel/files.ts';
import { ModelVersionSpecSchema } from '../../src/place/spec.ts';
import { effectiveFilter } from '../../src/storage/objecturl.ts';
import { planObjects } from '../../src/controllers/modelpreheat/request.ts';
import type { ManagerJob } from '../../src/manager/types.ts';
import { layoutRefusal } from '../../src/servers/driver.ts';
import { TorchServeDriver } from '../../src/servers/torchserve/driver.ts';
import { FileSetError, selectFiles, type FileSetFile } from '../../src/storage/fileset.ts';
import { ListError } from '../../src/storage/list.ts';
import { DEFAULT_TASK_ID_RULE } from '../../src/storage/taskid.ts';

const LOCATION = {
  type: 's3',
  bucket: 'weights',
  region: 'eu-west-1',
  credentialsSecretRef: { name: 's3' },
} as const;
const S3 = { type: 's3', accessKeyID: 'AKIDEXAMPLE', secretAccessKey: 'secret-value' } as const;

const files = (n: number): FileSetFile[] =>
  Array.from({ length: n }, (_, i) => {
    const path = `shard-${String(i).padStart(4, '0')}.bin`;
    return { key: `models/big/${path}`, path, size: 10 };
  });

const job = (id: number, state: ManagerJob['state'], failure: { url: string; description: string }[] = []) =>
  ({
    id,
    groupID: `group_${id}`,
    type: 'preheat',
    state,
    args: {},
    schedulerClusters: [],
    result: {
      jobStates: [
        {
          state,
          error: state === 'FAILURE' ? 'no available seed peer' : '',
          results: [
            {
              successTasks: state === 'SUCCESS' ? [{ url: 'u', hostname: 'seed', ip: '10.0.0.1' }] : [],
              failureTasks: failure,
              peers: [],
            },
          ],
        },
      ],
    },
  }) as ManagerJob;

describe('the directory fields of the schema', () => {
  const parse = (objectStorage: Record<string, unknown>) =>
    ModelPreheatSpec.safeParse({ objectStorage: { ...LOCATION, ...objectStorage } });

  it('a ModelPreheat names keys or a prefix, and patterns and caps only with a prefix', () => {
    expect(parse({ prefix: 'models/big/', include: ['*.bin'], maxFiles: 300, maxBytes: 10 }).success).toBe(
      true,
    );
    expect(parse({ keys: ['a.bin'] }).success).toBe(true);
    expect(parse({ prefix: '' }).success).toBe(true); // the bucket root
    expect(parse({}).error?.issues[0]?.message).toBe(
      'set exactly one of keys (objects named one by one) and prefix (a directory)',
    );
    expect(parse({ keys: ['a.bin'], prefix: 'p/' }).success).toBe(false);
    expect(parse({ keys: ['a.bin'], exclude: ['*.md'] }).error?.issues[0]?.message).toBe(
      'include, exclude, maxFiles and maxBytes choose the files of a prefix: set prefix, or remove them',
    );
    expect(parse({ prefix: '/models/' }).success).toBe(false);
    expect(parse({ prefix: 'models/../x/' }).success).toBe(false);
    expect(parse({ prefix: 'p/', maxFiles: 10_001 }).success).toBe(false);
  });

  const served = (extra: Record<string, unknown>) =>
    ServedModelSpec.safeParse({
      modelName: 'llama',
      modelServer: { endpoints: ['http://198.18.0.1:8081'] },
      ...extra,
    });

  it('a ServedModel names exactly one of fileName and files, and files needs preheat.objectStorage', () => {
    const preheat = { create: true, objectStorage: LOCATION };
    expect(served({ files: { prefix: 'models/llama/' }, preheat }).success).toBe(true);
    expect(
      served({ files: { prefix: 'm/', keys: ['config.json', 'w/model.safetensors'] }, preheat }).success,
    ).toBe(true);
    expect(served({ preheat }).error?.issues.map((i) => i.message)).toContain(
      'set exactly one of fileName (an archive), files (a directory in a bucket) and source (oci or huggingface)',
    );
    expect(served({ fileName: 'a.mar', files: { prefix: 'm/' }, preheat }).success).toBe(false);
    expect(served({ files: { prefix: 'm/' } }).error?.issues.map((i) => i.message)).toContain(
      "files needs preheat.objectStorage: the bucket the directory is in (the operator lists it with that Secret; the model server's agent signs with its own)",
    );
    expect(served({ files: { prefix: 'm/', keys: ['a.json'], include: ['*'] }, preheat }).success).toBe(
      false,
    );
  });

  it('the owned preheat of a directory: its prefix with the same rules, or its keys under the prefix', () => {
    const base = { modelName: 'llama', modelServer: { endpoints: ['http://198.18.0.1:8081'] } };
    const preheat = { create: true, objectStorage: LOCATION };
    const listed = ServedModelSpec.parse({
      ...base,
      preheat,
      files: { prefix: 'models/llama/', include: ['*.safetensors', '*.json'], maxFiles: 50 },
    });
    const owned = ModelPreheatSpec.parse(ownedPreheatSpec(listed));
    expect(owned.objectStorage).toMatchObject({
      prefix: 'models/llama/',
      include: ['*.safetensors', '*.json'],
      maxFiles: 50,
    });
    expect(owned.objectStorage!.keys).toBeUndefined();
    const named = ServedModelSpec.parse({
      ...base,
      preheat,
      files: { prefix: 'models/llama', keys: ['a.json'] },
    });
    expect(ModelPreheatSpec.parse(ownedPreheatSpec(named)).objectStorage!.keys).toEqual([
      'models/llama/a.json',
    ]);
    const root = ServedModelSpec.parse({ ...base, preheat, files: { prefix: '', keys: ['a.json'] } });
    expect(ModelPreheatSpec.parse(ownedPreheatSpec(root)).objectStorage!.keys).toEqual(['a.json']);
  });
});

describe('a directory in jobs', () => {
  const spec = ModelPreheatSpec.parse({ objectStorage: { ...LOCATION, prefix: 'models/big/' }, tag: 'v1' });

  it('splits 250 files into jobs of 100, 100 and 50, in path order', () => {
    const chunks = directoryChunks(files(250));
    expect(chunks.map((c) => c.length)).toEqual([100, 100, 50]);
    expect(chunks[1]![0]!.path).toBe('shard-0100.bin');
    expect(chunks[0]![0]).toEqual(files(1)[0]);
  });

  it("each file's task id is the one its job's request gives (signed URL, the filter the job sends)", async () => {
    const all = files(3);
    const plan = await planObjects(
      spec,
      all.map((f) => f.key),
      S3,
      { bio: 't' },
    );
    const tasks = directoryTasks(spec, all, DEFAULT_TASK_ID_RULE, S3);
    expect(tasks.map((t) => t.taskID)).toEqual(plan.tasks.map((t) => t.taskID));
    expect(tasks.map((t) => t.url)).toEqual(plan.tasks.map((t) => t.url));
    // With an empty filter the manager applies its default, and so do the ids.
    const bare = ModelPreheatSpec.parse({
      objectStorage: { ...LOCATION, prefix: 'models/big/', filteredQueryParams: [] },
    });
    const barePlan = await planObjects(bare, [all[0]!.key], S3, { bio: 't' });
    expect(directoryTasks(bare, [all[0]!], DEFAULT_TASK_ID_RULE, S3)[0]!.taskID).toBe(
      barePlan.tasks[0]!.taskID,
    );
    // A signed URL of a file names it.
    expect(pathsByURL(spec.objectStorage!, all)(plan.request.urls![1]!)).toBe(all[1]!.path);
  });

  it('an attempt creates jobs for the chunks without one and for those whose earlier job did not succeed', () => {
    expect(chunksToCreate([], 3, 1)).toEqual([0, 1, 2]);
    // Created half-way (the manager refused the third): the rest of this attempt.
    const half = [
      { id: 1, state: 'PENDING' as const, attempt: 1 },
      { id: 2, state: 'PENDING' as const, attempt: 1 },
    ];
    expect(chunksToCreate(half, 3, 1)).toEqual([2]);
    // The retry: the failed chunk only, and never a chunk of this attempt twice.
    const ended = [
      { id: 1, state: 'SUCCESS' as const, attempt: 1 },
      { id: 2, state: 'FAILURE' as const, attempt: 1 },
      { id: 3, state: 'SUCCESS' as const, attempt: 1 },
    ];
    expect(chunksToCreate(ended, 3, 2)).toEqual([1]);
    expect(chunksToCreate([ended[0]!, { id: 4, state: 'FAILURE', attempt: 2 }, ended[2]!], 3, 2)).toEqual([]);
    expect(runningState(half)).toBe('PENDING');
    expect(runningState([...half, { id: 3, state: 'SUCCESS' }])).toBe('STARTED');
  });

  it('names the failed files by path: the peers’ failures, or every file of a job that failed as a whole', () => {
    const all = files(250);
    const chunks = directoryChunks(all);
    const signed = (k: string) => `https://weights.s3.eu-west-1.amazonaws.com/${k}?X-Amz-Signature=abc`;
    const peerFailure = job(11, 'FAILURE', [
      { url: signed(all[105]!.key), description: 'origin 403' },
      { url: signed(all[105]!.key), description: 'origin 403 again' },
    ]);
    const whole = job(12, 'FAILURE');
    const byID = new Map([
      [11, chunks[1]],
      [12, chunks[2]],
    ]);
    const failed = failedFiles([peerFailure, whole], pathsByURL(spec.objectStorage!, all), (id) =>
      byID.get(id),
    );
    expect(failed[0]).toEqual({ path: 'shard-0105.bin', message: 'origin 403' });
    expect(failed).toHaveLength(1 + 50);
    expect(failed[1]).toEqual({
      path: 'shard-0200.bin',
      message: 'job 12 ended in FAILURE: no available seed peer',
    });
    // The listing unknown: the job stands for its files.
    expect(
      failedFiles(
        [whole],
        () => undefined,
        () => undefined,
      ),
    ).toEqual([
      { path: '(the files of job 12)', message: 'job 12 ended in FAILURE: no available seed peer' },
    ]);
  });

  it('keeps status bounded for 10,000 files: counts, bytes, 100 job ids, 20 failed files, 100 task ids', () => {
    const all = files(10_000);
    const chunks = directoryChunks(all);
    expect(chunks).toHaveLength(100);
    const jobs = chunks.map((_, k) => ({ id: k + 1, state: 'PENDING' as const, attempt: 1 }));
    const tasks = directoryTasks(spec, all.slice(0, 100), DEFAULT_TASK_ID_RULE, S3);
    const listing = { files: all, bytes: 100_000, digest: listingDigest(all) };
    const created = jobsCreatedStatus(
      {},
      spec,
      1,
      {
        jobs,
        created: 100,
        attempt: 1,
        managerURL: 'http://manager',
        groupID: 'group_1',
        files: {
          generation: 1,
          count: all.length,
          bytes: listing.bytes,
          digest: listing.digest,
          jobsTotal: 100,
          jobsSucceeded: 0,
        },
        tasks,
      },
      new Date('2026-01-01T00:00:00Z'),
    );
    expect(ModelPreheatStatus.safeParse(created).success).toBe(true);
    expect(created.conditions!.find((c) => c.type === 'Reconciling')!.reason).toBe('JobCreated');
    const done = directorySucceededStatus(
      created,
      spec,
      1,
      jobs.map((j) => ({ ...j, state: 'SUCCESS' as const })),
      jobs.map((j) => job(j.id, 'SUCCESS')),
      new Date('2026-01-01T00:10:00Z'),
    );
    expect(ModelPreheatStatus.safeParse(done).success).toBe(true);
    expect(done).toMatchObject({
      state: 'SUCCESS',
      files: { count: 10_000, jobsTotal: 100, jobsSucceeded: 100 },
    });
    expect(done.tasks).toHaveLength(100);
    expect(done.successTasks!.length).toBeLessThanOrEqual(20);
    expect(JSON.stringify(done).length).toBeLessThan(40_000);
    expect(done.conditions!.find((c) => c.type === 'Ready')!.message).toContain(
      'the 10000 files of prefix "models/big/" (100000 bytes) preheated in 100 job(s)',
    );
  });

  it('a listing is made once per generation; the digest changes with a path or a size', async () => {
    let lists = 0;
    const listings = new DirectoryListings(async () => {
      lists++;
      return [{ key: 'models/big/', size: 0 }, ...files(3).map((f) => ({ key: f.key, size: f.size }))];
    });
    const obj = (generation: number) =>
      ({ metadata: { namespace: 'ns', name: 'big', uid: 'u', generation }, spec }) as unknown as ModelPreheat;
    const first = await listings.of(obj(1), spec, async () => S3);
    expect(first).toMatchObject({ generation: 1, bytes: 30 });
    expect(first.files.map((f) => f.path)).toEqual(files(3).map((f) => f.path));
    await listings.of(obj(1), spec, async () => S3);
    expect(lists).toBe(1);
    await listings.of(obj(2), spec, async () => S3);
    expect(lists).toBe(2);
    const other = files(3).map((f, i) => (i === 2 ? { ...f, size: 11 } : f));
    expect(listingDigest(other)).not.toBe(first.digest);
    expect(listingDigest(files(3))).toBe(first.digest);
  });
});

describe("a ServedModel's listing (spec.files)", () => {
  const sm = (generation: number) =>
    ({ metadata: { namespace: 'ns', name: 'llama', uid: 'u', generation } }) as never;
  const spec = ServedModelSpec.parse({
    modelName: 'llama',
    modelServer: { endpoints: ['http://198.18.0.1:8081'] },
    files: { prefix: 'models/big/' },
    preheat: { create: true, objectStorage: LOCATION },
  });
  const b64 = (v: string) => Buffer.from(v).toString('base64');

  it("gives what the agent's PUT /v1/models/{name} takes (with the version), without any credential", () => {
    const chosen = selectFiles(
      { prefix: 'models/big/' },
      files(2).map((f) => ({ key: f.key, size: f.size })),
    );
    const body = { ...modelFiles(spec, undefined, chosen), version: '1' };
    const parsed = ModelVersionSpecSchema.safeParse(body);
    expect(parsed.success, JSON.stringify(parsed.error?.issues)).toBe(true);
    expect(parsed.data!.files.map((f) => [f.path, f.key])).toEqual(files(2).map((f) => [f.path, f.key]));
    // The preheat's filter: the location's default (s3) since neither names one.
    expect(parsed.data!.filter).toEqual(effectiveFilter({ type: 's3' }));
    expect(JSON.stringify(body)).not.toMatch(/credentialsSecretRef|secret/i);
  });

  it("is made once per generation, and once more when the preheat's listing differs", async () => {
    let listed = files(3);
    let lists = 0;
    const dirs = new ModelDirectories({
      secretData: async () => ({ access_key: b64('AK'), secret_key: b64('SK') }),
      lister: async () => {
        lists++;
        return listed.map((f) => ({ key: f.key, size: f.size }));
      },
    });
    const first = await dirs.of('ns/llama', sm(1), spec, undefined);
    expect(first).toMatchObject({ ok: true, count: 3, digest: listingDigest(files(3)) });
    await dirs.of('ns/llama', sm(1), spec, undefined);
    expect(lists).toBe(1);
    // The owned preheat listed after a fourth file arrived: this listing is made again, once.
    listed = files(4);
    const preheat = (digest: string) =>
      ({ metadata: { generation: 1 }, status: { files: { generation: 1, digest } } }) as never;
    const again = await dirs.of('ns/llama', sm(1), spec, preheat(listingDigest(files(4))));
    expect(again).toMatchObject({ ok: true, count: 4 });
    expect(lists).toBe(2);
    await dirs.of('ns/llama', sm(1), spec, preheat(listingDigest(files(4))));
    await dirs.of('ns/llama', sm(1), spec, preheat('0000000000000000'));
    await dirs.of('ns/llama', sm(1), spec, preheat('0000000000000000'));
    expect(lists).toBe(3);
    await dirs.of('ns/llama', sm(2), spec, undefined);
    expect(lists).toBe(4);
  });

  it('stands for the generation when a size bound was hit; a time bound is tried again', async () => {
    let lists = 0;
    let failure: 'tooLarge' | 'timedOut' = 'tooLarge';
    const dirs = new ModelDirectories({
      secretData: async () => ({ access_key: b64('AK'), secret_key: b64('SK') }),
      lister: async () => {
        lists++;
        throw new ListError(`cannot list s3 b prefix "m/": bound (${failure})`, { failure });
      },
    });
    const first = await dirs.of('ns/big', sm(1), spec, undefined);
    expect(first).toMatchObject({ ok: false, final: true });
    await dirs.of('ns/big', sm(1), spec, undefined);
    expect(lists).toBe(1);
    failure = 'timedOut';
    expect(await dirs.of('ns/big', sm(2), spec, undefined)).toMatchObject({ ok: false, final: false });
    await dirs.of('ns/big', sm(2), spec, undefined);
    expect(lists).toBe(3);
  });
});

describe("the operator's listing", () => {
  it('never sends a gcs access token to an endpoint the spec chose', async () => {
    const gcs = { type: 'gcs', bucket: 'weights', endpoint: 'https://collector.example' } as const;
    const credentials = { type: 'gcs', clientEmail: 'a@b', privateKey: 'k' } as never;
    await expect(operatorLister(gcs as never, credentials, 'm/', {})).rejects.toThrow(
      'not listing gcs weights prefix "m/" at https://collector.example: a gcs listing sends an access token to the endpoint',
    );
  });
});

describe('how a directory failure reads', () => {
  it('nothing listed and caps are final (the prefix is listed again on a spec change); a list error is retried', () => {
    const empty = describeFailure(
      (() => {
        try {
          selectFiles({ prefix: 'p/' }, []);
        } catch (e) {
          return e;
        }
      })(),
      'list',
    );
    expect(empty).toMatchObject({ reason: 'NoFilesListed', final: true, retry: { kind: 'none' } });
    expect(empty.message).toMatch(
      /^spec\.objectStorage\.prefix\/include\/exclude: no object under prefix "p\/"/,
    );
    const big = describeFailure(new FileSetError('maxBytes', 'too big: raise maxBytes'), 'list');
    expect(big).toMatchObject({ reason: 'DirectoryTooLarge', final: true });
    expect(big.message).toBe(
      'spec.objectStorage.maxBytes: too big: raise maxBytes (the prefix is listed again when the spec changes)',
    );
    expect(
      describeFailure(new ListError('cannot list s3 b prefix "p/": AccessDenied'), 'list'),
    ).toMatchObject({
      reason: 'ListFailed',
      final: false,
      blocked: true,
      retry: { kind: 'backoff' },
    });
    const tooLarge = describeFailure(
      new ListError('cannot list s3 b prefix "p/": a page of the listing was larger than 4194304 bytes', {
        failure: 'tooLarge',
      }),
      'list',
    );
    expect(tooLarge).toMatchObject({ reason: 'ListingTooLarge', final: true, retry: { kind: 'none' } });
    expect(tooLarge.message).toMatch(
      /^spec\.objectStorage\.prefix: cannot list .* listed again when the spec changes\)$/,
    );
    const timedOut = describeFailure(
      new ListError('cannot list s3 b prefix "p/": no complete answer', { failure: 'timedOut' }),
      'list',
    );
    // Stalled, and not tried again before minutes have passed.
    expect(timedOut).toMatchObject({ reason: 'ListingTimedOut', final: false, blocked: true });
    expect(timedOut.retry).toEqual({ kind: 'after', ms: LISTING_TIMED_OUT_RETRY_MS });
    expect(LISTING_TIMED_OUT_RETRY_MS).toBeGreaterThanOrEqual(5 * 60_000);
    expect(timedOut.message).toMatch(/^spec\.objectStorage\.endpoint: /);
  });
});

describe('the layouts a driver loads', () => {
  it('TorchServe loads archives and refuses a directory in its own words; a driver may load directories', () => {
    const torchserve = new TorchServeDriver({ secret: async () => '' });
    expect(layoutRefusal(torchserve, 'archive')).toBeUndefined();
    expect(layoutRefusal(torchserve, 'directory')).toMatch(
      /^TorchServe registers model archives \(\.mar\) that the endpoint plugin downloads, not directories/,
    );
    const both = { ...torchserve, name: 'agent', layouts: ['archive', 'directory'] as const };
    expect(layoutRefusal(both as never, 'directory')).toBeUndefined();
    const dirs = { name: 'triton', layouts: ['directory'] as const };
    expect(layoutRefusal(dirs as never, 'archive')).toBe(
      'the triton model server loads a directory, not one archive: set spec.files instead of spec.fileName',
    );
  });
});
