/**
 * The process of scenario 9 (run with --expose-gc): the runtime's Informer and Controller over the scenario's
 * ModelPreheats, whose reconcile does what a poll of the ModelPreheat controller does with the things that grew: it
 * reads the manager token through a SecretReader with the controller's own (process-long) signal, and redacts a
 * message quoting it. Time is compressed: one poll interval of `pollMs` real stands for the operator's longest poll
 * interval (1 simulated minute); the SecretReader's 30 s cache runs on the simulated clock, so Secrets are read from
 * the apiserver at the rate a real hour would read them.
 *
 *   node --expose-gc bench/scenarios/s9-soak-child.ts <kubeconfig> <namespace> <pollMs> <simulatedMinutes>
 *
 * Prints one JSON line per 5 simulated minutes: heap used and RSS after a full GC, the `abort` listeners on the
 * controller's signal (counted between reconciles: a read in flight holds one until it ends), the remembered secret
 * values, reconciles and Secret reads so far; then `{"done":true}`.
 */
import { getEventListeners } from 'node:events';
import { pino } from 'pino';
import { GVR } from '../../src/api/index.ts';
import { SecretReader } from '../../src/controllers/secrets.ts';
import { redact, rememberedCount } from '../../src/redact.ts';
import { Controller, Informer, KubeClient, type KubeObject } from '../../src/runtime/index.ts';
import { kubeConfig } from '../../test/support/kube.ts';

const [kubeconfigPath, namespace, pollArg, minutesArg] = process.argv.slice(2);
const pollMs = Number(pollArg);
const minutes = Number(minutesArg);
const gc = (globalThis as { gc?: () => void }).gc;
if (!kubeconfigPath || !namespace || !(pollMs > 0) || !(minutes > 0) || !gc)
  throw new Error('usage: node --expose-gc s9-soak-child.ts <kubeconfig> <namespace> <pollMs> <minutes>');

type Preheat = KubeObject & {
  spec: { url: string; manager: { tokenSecretRef: { name: string; key: string } } };
};

const kube = new KubeClient(kubeConfig(kubeconfigPath));
const started = Date.now();
const scale = 60_000 / pollMs;
const simulatedNow = () => started + (Date.now() - started) * scale;
const secrets = new SecretReader(kube, { ttlMs: 30_000, now: simulatedNow });
const informer = new Informer<Preheat>(kube.resource<Preheat>(GVR.modelPreheats), {
  namespace,
  resyncPeriodMs: 0,
});
let signal: AbortSignal | undefined;
let reconciles = 0;
let secretReads = 0;
let leaks = 0;
const controller = new Controller<Preheat>(
  {
    name: 'soak',
    for: informer,
    workers: 4,
    reconcile: async (key, ctx) => {
      signal = ctx.signal;
      const obj = informer.get(key);
      if (!obj) return;
      const token = await secrets.value(namespace, obj.spec.manager.tokenSecretRef, ctx.signal);
      secretReads++;
      const message = redact(`GET ${obj.spec.url}?access_token=${token}: 503 (Bearer ${token})`);
      if (message.includes(token)) leaks++;
      reconciles++;
      // The operator's longest poll interval, jittered as the work queue would spread the objects.
      return { requeueAfter: pollMs * (0.9 + Math.random() * 0.2) };
    },
  },
  { logger: pino({ level: 'silent' }) },
);

informer.start();
await informer.waitForSync();
controller.start();

const sample = async (minute: number) => {
  // A read in flight holds its own listener until it ends: count between reconciles (waiting at most 1 s).
  for (let i = 0; i < 1000 && controller.queue.inFlight > 0; i++) await new Promise((r) => setTimeout(r, 1));
  const listeners = signal ? getEventListeners(signal, 'abort').length : 0;
  const inFlight = controller.queue.inFlight;
  gc();
  const m = process.memoryUsage();
  console.log(
    JSON.stringify({
      minute,
      heapUsed: m.heapUsed,
      heapTotal: m.heapTotal,
      external: m.external,
      rss: m.rss,
      listeners,
      inFlight,
      remembered: rememberedCount().values,
      reconciles,
      secretReads,
      leaks,
    }),
  );
};
for (let minute = 0; minute <= minutes; minute += 5) {
  await sample(minute);
  if (minute < minutes) await new Promise((r) => setTimeout(r, 5 * pollMs));
}
await controller.stop(5_000);
await informer.stop();
await kube.close();
console.log(JSON.stringify({ done: true }));
