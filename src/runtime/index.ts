/**
 * The controller runtime: what a controller author imports. A controller is a factory registered in
 * src/controllers/index.ts:
 *
 *   export function fooController(ctx: ControllerContext): Controller<Foo> {
 *     const foos = ctx.informers.get<Foo>(FOO_GVR);                      // shared, cached; FOO_GVR: a Gvr
 *     const slices = ctx.informers.get<EndpointSlice>(GVR.endpointSlices);
 *     foos.addIndexer('service', (f) => [`${f.metadata.namespace}/${f.spec.service}`]);
 *     return new Controller<Foo>(
 *       {
 *         name: 'foo',
 *         for: foos,
 *         predicate: specChanged,                                          // skip our own status writes
 *         watches: [{ informer: slices, map: (s) => foos.byIndex('service', svcKey(s)).map(objectKey) }],
 *         workers: ctx.config.workers,
 *         reconcile: async (key, rc) => {
 *           const foo = foos.get(key);                                     // from the cache; undefined = gone
 *           if (!foo) return;
 *           ...                                                            // converge; throw to retry with backoff,
 *           await ctx.status.update(FOO_GVR, foo, (o) => ({                  // TerminalError to give up
 *             ...o.status,
 *             conditions: setCondition(o.status?.conditions, { type: 'Ready', status: 'True', reason: 'Done' },
 *               o.metadata.generation),
 *           }));
 *           ctx.events.record(foo, 'Normal', 'Done', 'converged');
 *           return { requeueAfter: 30_000 };                               // poll again later
 *         },
 *       },
 *       { logger: ctx.logger, metrics: ctx.metrics },
 *     );
 *   }
 */
export { Controller, TerminalError, specChanged } from './controller.ts';
export type { ReconcileContext, ReconcileResult, WatchSource } from './controller.ts';
export { applyConditions, getCondition, setCondition } from './conditions.ts';
export type { ConditionChange } from './conditions.ts';
export { EventRecorder } from './events.ts';
export { addFinalizer, hasFinalizer, isBeingDeleted, removeFinalizer } from './finalizers.ts';
export { DelegatedAuth } from './authz.ts';
export { HealthServer } from './health.ts';
export { selfSignedCertificate } from './tls.ts';
export { Informer } from './informer.ts';
export { ApiError, GVR, KubeClient, ResourceClient, isAlreadyExists } from './kube.ts';
export type { Gvr, KubeObject, RequestRecord, WatchEvent } from './kube.ts';
export { createLogger } from './logger.ts';
export type { Logger } from './logger.ts';
export { Manager } from './manager.ts';
export type { ControllerContext, ControllerFactory } from './manager.ts';
export { Metrics } from './metrics.ts';
export { StatusConflict, StatusWriter, type StatusUpdateOptions } from './status.ts';
export type { StatusResult } from './status.ts';
export type { RateLimiterOptions } from './workqueue.ts';
export { FairQueue, namespaceOf } from './fair.ts';
