/**
 * Generates test/fixtures/health-status.json: statuses of both kinds (healthy, progressing, degraded, no status, an
 * older generation) as the controllers write them, from the pure status modules, with the Argo CD health and the
 * kstatus each must get. test/integration/health-checks.test.ts runs the Argo CD Lua checks and kstatus on them;
 * test/unit/health-fixtures.test.ts checks that regenerating yields the committed file.
 *
 *   node scripts/gen-health-fixtures.ts           rewrite the file
 *   node scripts/gen-health-fixtures.ts --check   exit 1 when the file differs from what the code produces
 */
import { readFileSync, writeFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { format, resolveConfig } from 'prettier';
import {
  preheatConditions,
  preheatPhase,
  type PreheatObservation,
} from '../src/controllers/modelpreheat/conditions.ts';
import {
  servedModelConditions,
  type ServedModelObservation,
} from '../src/controllers/servedmodel/conditions.ts';
import { applyConditions } from '../src/runtime/conditions.ts';

export function healthFixtures(): unknown[] {
  const t = new Date('2026-03-02T10:00:00Z');
  const meta = (name: string, gen: number) => ({
    name,
    namespace: 'models',
    generation: gen,
    uid: '0f6c2a7e-5d4b-4c1e-9a3f-1b2c3d4e5f60',
    creationTimestamp: '2026-03-02T09:58:00Z',
  });
  const mphSpec = {
    type: 'file',
    url: 'https://models.s3.eu-west-1.amazonaws.com/resnet/resnet-18.mar',
    scope: 'single_seed_peer',
    retry: { limit: 3, backoff: '30s' },
    deleteJobOnCleanup: false,
  };
  const mph = (name: string, extra: object, obs?: PreheatObservation, gen = 1, statusGen = gen) => ({
    apiVersion: 'peerload.io/v1alpha1',
    kind: 'ModelPreheat',
    metadata: meta(name, gen),
    spec: mphSpec,
    ...(obs
      ? {
          status: {
            observedGeneration: statusGen,
            ...extra,
            phase: preheatPhase(obs),
            conditions: applyConditions(undefined, preheatConditions(obs), statusGen, t),
          },
        }
      : {}),
  });
  const smSpec = {
    modelName: 'resnet-18',
    fileName: 'resnet/resnet-18.mar',
    modelServer: { service: { name: 'torchserve', port: 'management' }, scheme: 'http', pluginPath: 'p2p' },
    workers: { min: 1 },
    rollout: { maxConcurrent: 10, seedFirst: true },
  };
  const smBase: ServedModelObservation = {
    modelName: 'resnet-18',
    serviceName: 'torchserve',
    serviceFound: true,
    gate: { state: 'none' },
    ready: 0,
    desired: 3,
    failures: [],
  };
  const sm = (name: string, extra: object, obs?: Partial<ServedModelObservation>, gen = 1) => ({
    apiVersion: 'peerload.io/v1alpha1',
    kind: 'ServedModel',
    metadata: meta(name, gen),
    spec: smSpec,
    ...(obs
      ? {
          status: {
            observedGeneration: gen,
            ...extra,
            conditions: applyConditions(undefined, servedModelConditions({ ...smBase, ...obs }), gen, t),
          },
        }
      : {}),
  });
  const job = {
    jobID: 41,
    groupID: 'group_6b1f0c7a-2d3e-4f50-8a9b-0c1d2e3f4a5b',
    managerURL: 'http://dragonfly-manager.dragonfly-system:8080',
    jobGeneration: 1,
    startedAt: '2026-03-02T09:58:01Z',
  };
  return [
    {
      name: 'ModelPreheat succeeded',
      argocd: 'Healthy',
      kstatus: 'Current',
      object: mph(
        'succeeded',
        {
          ...job,
          state: 'SUCCESS',
          attempts: 1,
          completedAt: '2026-03-02T09:58:09Z',
          successCount: 1,
          failureCount: 0,
        },
        { outcome: 'Succeeded', reason: 'JobSucceeded', message: 'preheat job 41 succeeded on 1 peer(s)' },
      ),
    },
    {
      name: 'ModelPreheat job running',
      argocd: 'Progressing',
      kstatus: 'InProgress',
      object: mph(
        'running',
        { ...job, state: 'STARTED', attempts: 1 },
        {
          outcome: 'Progressing',
          reason: 'JobRunning',
          message: 'preheat job 41 is STARTED, attempt 1 of 4',
          jobState: 'STARTED',
        },
      ),
    },
    {
      name: 'ModelPreheat between attempts',
      argocd: 'Progressing',
      kstatus: 'InProgress',
      object: mph(
        'retrying',
        { ...job, state: 'FAILURE', attempts: 1, nextRetryAt: '2026-03-02T09:58:40Z' },
        {
          outcome: 'Progressing',
          reason: 'JobFailedWillRetry',
          message:
            'attempt 1 of 4 failed: job 41 ended in FAILURE: download origin failed 404; retrying in 30s',
          jobState: 'FAILURE',
        },
      ),
    },
    {
      name: 'ModelPreheat manager unreachable',
      argocd: 'Progressing',
      kstatus: 'InProgress',
      object: mph(
        'unreachable',
        {},
        {
          outcome: 'Progressing',
          reason: 'ManagerUnavailable',
          message:
            'create the preheat job: manager create preheat job failed (ECONNREFUSED): connect ECONNREFUSED 10.96.0.20:8080',
        },
      ),
    },
    {
      name: 'ModelPreheat failed after its retries',
      argocd: 'Degraded',
      kstatus: 'Failed',
      object: mph(
        'failed',
        { ...job, state: 'FAILURE', attempts: 4, completedAt: '2026-03-02T10:06:00Z' },
        {
          outcome: 'Failed',
          reason: 'JobFailed',
          message: 'preheat failed after 4 attempt(s): job 44 ended in FAILURE: download origin failed 404',
          jobState: 'FAILURE',
        },
      ),
    },
    {
      name: 'ModelPreheat auth refused',
      argocd: 'Degraded',
      kstatus: 'Failed',
      object: mph(
        'auth-refused',
        {},
        {
          outcome: 'Blocked',
          reason: 'ManagerAuthFailed',
          message:
            'create the preheat job: manager create preheat job failed (HTTP 401): unauthorized (check the manager token or user Secret)',
        },
      ),
    },
    {
      name: 'ModelPreheat without status',
      argocd: 'Progressing',
      kstatus: 'Current',
      object: mph('new', {}),
    },
    {
      name: 'ModelPreheat status of an older generation',
      argocd: 'Progressing',
      kstatus: 'InProgress',
      object: mph(
        'edited',
        { ...job, state: 'SUCCESS', attempts: 1 },
        { outcome: 'Succeeded', reason: 'JobSucceeded', message: 'preheat job 41 succeeded on 1 peer(s)' },
        2,
        1,
      ),
    },
    {
      name: 'ServedModel ready on every replica',
      argocd: 'Healthy',
      kstatus: 'Current',
      object: sm(
        'ready',
        { ready: '3/3', readyReplicas: 3, desiredReplicas: 3, servedVersion: '1.0' },
        { ready: 3 },
      ),
    },
    {
      name: 'ServedModel scaling out (Ready on the replicas that had it, new ones on their way)',
      argocd: 'Progressing',
      kstatus: 'InProgress',
      object: sm(
        'scaling-out',
        { ready: '3/5', readyReplicas: 3, desiredReplicas: 5, servedVersion: '1.0' },
        { ready: 3, desired: 5, wasReady: true },
      ),
    },
    {
      name: 'ServedModel that lost the model on a replica',
      argocd: 'Progressing',
      kstatus: 'InProgress',
      object: sm(
        'lost-replica',
        { ready: '2/3', readyReplicas: 2, desiredReplicas: 3, servedVersion: '1.0' },
        { ready: 2, wasReady: true, lost: 1 },
      ),
    },
    {
      name: 'ServedModel rolling out',
      argocd: 'Progressing',
      kstatus: 'InProgress',
      object: sm('rolling-out', { ready: '1/3', readyReplicas: 1, desiredReplicas: 3 }, { ready: 1 }),
    },
    {
      name: 'ServedModel with a dead replica',
      argocd: 'Progressing',
      kstatus: 'InProgress',
      object: sm(
        'dead-replica',
        { ready: '2/3', readyReplicas: 2, desiredReplicas: 3 },
        {
          ready: 2,
          failures: [
            {
              replica: 'torchserve-2',
              reason: 'ModelServerUnavailable',
              message: 'connect ECONNREFUSED 10.244.1.7:8081',
              retryable: true,
            },
          ],
        },
      ),
    },
    {
      name: "ServedModel whose layer's bytes are not its digest (retried under a fresh task)",
      argocd: 'Progressing',
      kstatus: 'InProgress',
      object: sm(
        'checksum-mismatch',
        { ready: '0/2', readyReplicas: 0, desiredReplicas: 2 },
        {
          ready: 0,
          desired: 2,
          failures: ['triton-0', 'triton-1'].map((replica) => ({
            replica,
            reason: 'ChecksumMismatch' as const,
            message: `agent http://10.244.1.7:9090 place resnet 1 failed (reported by the agent): ChecksumMismatch: layer 1 (sha256:5d1f0c7a2d3e, model.onnx): its bytes hash to sha256 ${'b'.repeat(64)}, not the ${'5d1f0c7a2d3e'.padEnd(64, '0')} its source publishes`,
            retryable: true,
          })),
        },
      ),
    },
    {
      name: 'ServedModel whose archive has an entry leaving its directory',
      argocd: 'Degraded',
      kstatus: 'Failed',
      object: sm(
        'unsafe-archive',
        { ready: '0/1', readyReplicas: 0, desiredReplicas: 1 },
        {
          ready: 0,
          desired: 1,
          failures: [
            {
              replica: 'triton-0',
              reason: 'UnsafeArchive',
              message:
                'agent http://10.244.1.7:9090 place resnet 1 failed (reported by the agent): UnsafeTarEntry: layer 2 (sha256:0c9e55d17b1a, code): the tar entry "../../x" is refused',
              retryable: false,
            },
          ],
        },
      ),
    },
    {
      name: 'ServedModel whose Service does not exist',
      argocd: 'Degraded',
      kstatus: 'Failed',
      object: sm(
        'no-service',
        { ready: '0/0', readyReplicas: 0, desiredReplicas: 0 },
        { desired: 0, serviceFound: false },
      ),
    },
    {
      name: 'ServedModel whose preheat failed',
      argocd: 'Degraded',
      kstatus: 'Failed',
      object: sm(
        'preheat-failed',
        { ready: '0/3', readyReplicas: 0, desiredReplicas: 3, preheatName: 'preheat-failed-preheat' },
        {
          gate: {
            state: 'closed',
            preheatName: 'preheat-failed-preheat',
            reason: 'PreheatFailed',
            message:
              'ModelPreheat preheat-failed-preheat failed: JobFailed: preheat failed after 4 attempt(s)',
            final: true,
          },
        },
      ),
    },
    {
      name: 'ServedModel with keys the model server refuses',
      argocd: 'Degraded',
      kstatus: 'Failed',
      object: sm(
        'auth-refused',
        { ready: '0/2', readyReplicas: 0, desiredReplicas: 2 },
        {
          desired: 2,
          failures: ['torchserve-0', 'torchserve-1'].map((replica) => ({
            replica,
            reason: 'ModelServerAuthFailed',
            message: 'model server answered 401: Token Authorization failed',
            retryable: false,
          })),
        },
      ),
    },
    { name: 'ServedModel without status', argocd: 'Progressing', kstatus: 'Current', object: sm('new', {}) },
  ];
}

const FILE = fileURLToPath(new URL('../test/fixtures/health-status.json', import.meta.url));

if (import.meta.main) {
  const text = await format(JSON.stringify(healthFixtures()), {
    ...(await resolveConfig(FILE)),
    filepath: FILE,
  });
  if (process.argv.includes('--check')) {
    if (readFileSync(FILE, 'utf8') !== text) {
      console.error(`${FILE} is out of date: run node scripts/gen-health-fixtures.ts`);
      process.exit(1);
    }
  } else writeFileSync(FILE, text);
}
