/**
 * The ModelPreheat controller: the reconciler (reconciler.ts) on the ModelPreheat informer, woken by spec changes
 * only (its own status writes do not wake it; polling is by requeue).
 */
import { Controller, specChanged, type ControllerContext } from '../../runtime/index.ts';
import type { ModelPreheat } from '../../api/index.ts';
import { ModelPreheatReconciler } from './reconciler.ts';

export function modelPreheatController(ctx: ControllerContext): Controller<ModelPreheat> {
  const reconciler = new ModelPreheatReconciler(ctx);
  return new Controller<ModelPreheat>(
    {
      name: 'modelpreheat',
      for: reconciler.informer,
      reconcile: (key, rc) => reconciler.reconcile(key, rc),
      workers: ctx.config.workers,
      maxWorkersPerNamespace: ctx.config.maxWorkersPerNamespace,
      predicate: specChanged,
    },
    { logger: ctx.logger, metrics: ctx.metrics },
  );
}
