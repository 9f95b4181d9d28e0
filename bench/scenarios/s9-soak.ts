/**
 * Scenario 9: nothing grows. 500 ModelPreheats, each naming one of 50 manager-token Secrets, polled for a simulated
 * hour (one real `pollMs` per simulated minute, the operator's longest poll interval) by a separate process running
 * the runtime's Informer and Controller with a reconcile that reads its Secret through a SecretReader with the
 * controller's signal and redacts a message quoting it (s9-soak-child.ts). Every 10 simulated minutes each Secret
 * gets a new value (a rotation), so remembered secret values would pile up if they were kept.
 *
 * Heap used and RSS (after a full GC), the `abort` listeners on the controller's process-long signal and the
 * remembered secret values are sampled every 5 simulated minutes. Flat: the value at the end is at most 1.05x the
 * value after warm-up (10 simulated minutes). A reconcile count of at least 10,000 is checked too.
 */
import { spawn } from 'node:child_process';
import { join, resolve } from 'node:path';
import { createInterface } from 'node:readline';
import type { KubeObject } from '../../src/runtime/index.ts';
import type { ControlPlane } from '../../test/support/controlplane.ts';
import { GVR, benchClient, newNamespace } from '../lib/kube.ts';
import { MiB, mapLimit, progress, stat, type Row } from '../lib/report.ts';
import { deployedNodeOptions } from './s5-idle.ts';

const ROOT = resolve(import.meta.dirname, '../..');
const OBJECTS = 500;
const SECRETS = 50;
const MINUTES = 60;
const WARM_UP_MINUTE = 10;
const ROTATE_EVERY_MINUTES = 10;

const SECRET_GVR = {
  group: '',
  version: 'v1',
  resource: 'secrets',
  kind: 'Secret',
  namespaced: true,
} as const;

export interface S9Options {
  /** Real milliseconds per simulated minute. Default 2000 (the hour in 2 minutes). */
  pollMs: number;
}

interface Sample {
  minute: number;
  heapUsed: number;
  heapTotal: number;
  external: number;
  rss: number;
  listeners: number;
  /** Reconciles in flight when the listeners were counted (0 unless none ended within 1 s). */
  inFlight: number;
  remembered: number;
  reconciles: number;
  secretReads: number;
  leaks: number;
}

const token = (i: number, rotation: number) => `soak-token-${i}-rotation-${rotation}-${'x'.repeat(24)}`;

export async function scenario9(cp: ControlPlane, o: S9Options): Promise<{ rows: Row[]; raw: unknown }> {
  const kube = benchClient(cp);
  const samples: Sample[] = [];
  try {
    const ns = await newNamespace(kube, 'bench9');
    const secrets = kube.resource(SECRET_GVR);
    for (let i = 0; i < SECRETS; i++)
      await secrets.create({
        apiVersion: 'v1',
        kind: 'Secret',
        metadata: { name: `token-${i}`, namespace: ns },
        stringData: { token: token(i, 0) },
      } as unknown as KubeObject);
    const mph = kube.resource(GVR.modelPreheats);
    await mapLimit(
      Array.from({ length: OBJECTS }, (_, i) => i),
      16,
      (i) =>
        mph.create({
          apiVersion: 'peerload.io/v1alpha1',
          kind: 'ModelPreheat',
          metadata: { name: `p-${i}`, namespace: ns },
          spec: {
            url: `http://127.0.0.1:9/models/p-${i}.mar`,
            manager: {
              url: 'http://127.0.0.1:9',
              apiPath: '/oapi/v1',
              tokenSecretRef: { name: `token-${i % SECRETS}`, key: 'token' },
            },
          },
        } as unknown as KubeObject),
    );
    progress(
      `s9: ${OBJECTS} ModelPreheats and ${SECRETS} Secrets created; soaking ${MINUTES} simulated minutes`,
    );

    const child = spawn(
      join(ROOT, 'node_modules/.bin/node'),
      [
        '--expose-gc',
        join(ROOT, 'bench/scenarios/s9-soak-child.ts'),
        cp.kubeconfigPath,
        ns,
        String(o.pollMs),
        String(MINUTES),
      ],
      // With the Deployment's NODE_OPTIONS (heap and semi-space bounds), as scenario 5: what is deployed.
      { stdio: ['ignore', 'pipe', 'inherit'], env: { ...process.env, ...deployedNodeOptions() } },
    );
    const exited = new Promise<number | null>((r) => child.once('exit', (code) => r(code)));
    let rotation = 0;
    const rotations = setInterval(() => {
      rotation++;
      void mapLimit(
        Array.from({ length: SECRETS }, (_, i) => i),
        8,
        (i) => secrets.patch(ns, `token-${i}`, { stringData: { token: token(i, rotation) } }),
      ).catch((e: unknown) => progress(`s9: rotation failed: ${(e as Error).message}`));
    }, ROTATE_EVERY_MINUTES * o.pollMs);
    try {
      for await (const line of createInterface({ input: child.stdout! })) {
        const msg = JSON.parse(line) as Sample | { done: true };
        if ('done' in msg) break;
        samples.push(msg);
        progress(
          `s9: minute ${msg.minute}: heap ${(msg.heapUsed / MiB).toFixed(1)} MiB, RSS ${(msg.rss / MiB).toFixed(1)} MiB, ` +
            `(V8 heap total ${(msg.heapTotal / MiB).toFixed(1)}, external ${(msg.external / MiB).toFixed(1)}), ` +
            `listeners ${msg.listeners}, remembered ${msg.remembered}, reconciles ${msg.reconciles}`,
        );
      }
    } finally {
      clearInterval(rotations);
    }
    const code = await exited;
    if (code !== 0) throw new Error(`the soak process exited with ${code}`);
  } finally {
    await kube.close();
  }

  const warm = samples.find((s) => s.minute === WARM_UP_MINUTE);
  const end = samples.at(-1);
  if (!warm || !end) throw new Error('the soak process gave no samples');
  const scenario = `${OBJECTS} ModelPreheats polled for ${MINUTES} simulated minutes (${o.pollMs} ms each), ${SECRETS} Secrets rotated every ${ROTATE_EVERY_MINUTES} min`;
  const flat = (v: number, w: number) => v <= w * 1.05;
  const series = (f: (s: Sample) => number) => samples.map((s) => `${s.minute}:${f(s)}`).join(' ');
  const row = (
    id: string,
    metric: string,
    unit: string,
    f: (s: Sample) => number,
    show: (v: number) => string,
  ): Row => ({
    id,
    scenario,
    metric: `${metric}, at the end (the value after ${WARM_UP_MINUTE} min of warm-up is the reference)`,
    unit,
    value: stat([f(end)]),
    reference: stat([f(warm)]),
    referenceLabel: `after ${WARM_UP_MINUTE} min`,
    ...(f(warm) > 0 ? { ratio: stat([f(end) / f(warm)]) } : {}),
    target: '≤ 1.05× after warm-up',
    pass: flat(f(end), f(warm)),
    notes: `every 5 min: ${series((s) => Number(show(f(s))))}`,
  });
  const rows: Row[] = [
    row(
      '9.1',
      'V8 heap used after a full GC',
      'MiB',
      (s) => s.heapUsed / MiB,
      (v) => v.toFixed(1),
    ),
    row(
      '9.2',
      'RSS after a full GC',
      'MiB',
      (s) => s.rss / MiB,
      (v) => v.toFixed(1),
    ),
    row('9.3', "`abort` listeners on the controller's signal", '', (s) => s.listeners, String),
    row('9.4', 'remembered secret values (redaction)', '', (s) => s.remembered, String),
    {
      id: '9.5',
      scenario,
      metric: 'reconciles that read a Secret (and redacted a message quoting it)',
      unit: '',
      value: stat([end.secretReads]),
      target: '≥ 10,000, no value unredacted',
      pass: end.secretReads >= 10_000 && end.leaks === 0,
      notes: `${end.reconciles} reconciles; ${end.leaks} messages still quoting their token after redaction`,
    },
  ];
  return { rows, raw: { objects: OBJECTS, secrets: SECRETS, minutes: MINUTES, pollMs: o.pollMs, samples } };
}
