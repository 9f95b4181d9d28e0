/**
 * A TEST operator: the runtime's Manager with a recording controller over ConfigMaps (not the product
 * controllers). Used in-process (`recordingController`) and as a separate process (run this file with
 * node): flags are the operator's (`--namespace`, `--identity`, `--metrics-address`, ...), test behaviour
 * comes from the environment:
 *   TEST_RECORD_FILE  JSON lines {phase: start|end, key, t, identity, reconcileID} appended per reconcile
 *   TEST_SLEEP_MS     time each reconcile takes (default 50)
 *   TEST_REQUEUE_MS   requeueAfter returned by each reconcile (default: none)
 * Appends with O_APPEND are atomic for lines this short, so several processes can share one file.
 */
import { appendFileSync } from 'node:fs';
import { loadConfig } from '../../src/config.ts';
import { OPERATOR_IDENTITY } from '../../src/controllers/index.ts';
import {
  Controller,
  GVR,
  Manager,
  createLogger,
  type ControllerFactory,
  type KubeObject,
  type ReconcileContext,
  type ReconcileResult,
  type RateLimiterOptions,
} from '../../src/runtime/index.ts';

export interface ConfigMap extends KubeObject {
  data?: Record<string, string>;
}

export interface ReconcileRecord {
  phase: 'start' | 'end';
  key: string;
  /** ms since epoch, with sub-ms precision (performance.timeOrigin + now()), comparable across processes. */
  t: number;
  identity: string;
  reconcileID: string;
  /** The ConfigMap data the reconcile saw (start only). */
  data?: Record<string, string> | null;
  error?: string;
}

export interface RecordingOptions {
  name?: string;
  identity: string;
  record: (r: ReconcileRecord) => void;
  /** What the reconcile does after recording its start; default: sleep 50 ms. */
  behavior?: (cm: ConfigMap | undefined, ctx: ReconcileContext) => Promise<ReconcileResult | void>;
  workers?: number;
  rateLimiter?: RateLimiterOptions;
  labelSelector?: string;
}

export const now = (): number => performance.timeOrigin + performance.now();

export function recordingController(opts: RecordingOptions): ControllerFactory {
  return (ctx) => {
    const informer = ctx.informers.get<ConfigMap>(GVR.configMaps, { labelSelector: opts.labelSelector });
    return new Controller<ConfigMap>(
      {
        name: opts.name ?? 'test-configmaps',
        for: informer,
        workers: opts.workers ?? ctx.config.workers,
        rateLimiter: opts.rateLimiter,
        reconcile: async (key, rctx) => {
          const cm = informer.get(key);
          opts.record({
            phase: 'start',
            key,
            t: now(),
            identity: opts.identity,
            reconcileID: rctx.reconcileID,
            data: cm ? (cm.data ?? {}) : null,
          });
          let error: string | undefined;
          try {
            return opts.behavior ? await opts.behavior(cm, rctx) : await sleep(50);
          } catch (err) {
            error = (err as Error).message;
            throw err;
          } finally {
            opts.record({
              phase: 'end',
              key,
              t: now(),
              identity: opts.identity,
              reconcileID: rctx.reconcileID,
              error,
            });
          }
        },
      },
      { logger: ctx.logger, metrics: ctx.metrics },
    );
  };
}

export function sleep(ms: number): Promise<void> {
  return new Promise((r) => setTimeout(r, ms));
}

/** Pairs start/end records into intervals and returns pairs of intervals that overlap (should be none). */
export function overlaps(
  records: ReconcileRecord[],
  sameKeyOnly = false,
): [ReconcileRecord, ReconcileRecord][] {
  const byId = new Map<string, { start?: ReconcileRecord; end?: ReconcileRecord }>();
  for (const r of records) {
    const e = byId.get(r.reconcileID) ?? {};
    e[r.phase] = r;
    byId.set(r.reconcileID, e);
  }
  const intervals = [...byId.values()]
    .filter((e) => e.start)
    .map((e) => ({ start: e.start!, end: e.end ?? { ...e.start!, t: Infinity } }))
    .sort((a, b) => a.start.t - b.start.t);
  const out: [ReconcileRecord, ReconcileRecord][] = [];
  for (let i = 0; i < intervals.length; i++) {
    for (let j = i + 1; j < intervals.length && intervals[j]!.start.t < intervals[i]!.end.t; j++) {
      const a = intervals[i]!;
      const b = intervals[j]!;
      if (sameKeyOnly ? a.start.key === b.start.key : a.start.identity !== b.start.identity)
        out.push([a.start, b.start]);
    }
  }
  return out;
}

async function main(): Promise<void> {
  const loaded = loadConfig(process.argv.slice(2));
  if ('help' in loaded) throw new Error('no help here');
  const { config } = loaded;
  const file = process.env.TEST_RECORD_FILE;
  const sleepMs = Number(process.env.TEST_SLEEP_MS ?? 50);
  const requeueMs = process.env.TEST_REQUEUE_MS ? Number(process.env.TEST_REQUEUE_MS) : undefined;
  const logger = createLogger(config.logLevel);
  const manager = new Manager({ config, logger, ...OPERATOR_IDENTITY }).add(
    recordingController({
      identity: config.identity,
      record: (r) => file && appendFileSync(file, JSON.stringify(r) + '\n'),
      behavior: async () => {
        await sleep(sleepMs);
        return requeueMs !== undefined ? { requeueAfter: requeueMs } : undefined;
      },
    }),
  );
  const code = await manager.run();
  logger.flush();
  process.exitCode = code;
  setTimeout(() => process.exit(code), 2_000).unref();
}

if (import.meta.main) await main();
