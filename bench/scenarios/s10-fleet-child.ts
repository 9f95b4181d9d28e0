/**
 * The operator process of scenario 10: the ModelPreheat and ServedModel controllers on the scenario's control plane,
 * as `peerload operator` wires them, except that the model servers' EndpointSlice addresses (198.18.x.y, never
 * routed) are reached on loopback (loopbackDispatcher), which only an in-process controller can be given. Run with
 * the Deployment's NODE_OPTIONS, so its RSS is the deployed operator's.
 *
 *   node bench/scenarios/s10-fleet-child.ts <kubeconfig> <operator flags...>
 *
 * Prints `ready` once started; stops on SIGTERM.
 */
import { createServedModelController } from '../../src/controllers/index.ts';
import { modelPreheatController } from '../../src/controllers/modelpreheat/index.ts';
import { loopbackDispatcher } from '../../test/support/endpointslices.ts';
import { kubeConfig } from '../../test/support/kube.ts';
import { startManager } from '../../test/support/runtime-harness.ts';

const [kubeconfigPath, ...flags] = process.argv.slice(2);
if (!kubeconfigPath) throw new Error('usage: s10-fleet-child.ts <kubeconfig> <operator flags...>');
const operator = await startManager(kubeConfig(kubeconfigPath), flags, [
  modelPreheatController,
  (ctx) => createServedModelController(ctx, { dispatcher: loopbackDispatcher() }),
]);
// The harness records every request for tests; this process is measured, so the record is not kept.
setInterval(() => operator.requests.splice(0), 1_000).unref();
console.log('ready');
process.once('SIGTERM', () => void operator.stop().then(() => process.exit(0)));
