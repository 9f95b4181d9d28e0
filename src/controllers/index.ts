/**
 * The controllers the operator runs. Each entry builds one Controller from the shared context
 * (informers, clients, status writer, event recorder, config); see src/runtime/manager.ts.
 */
import type { ControllerFactory } from '../runtime/index.ts';
import { modelPreheatController } from './modelpreheat.ts';
import { servedModelController } from './servedmodel.ts';

export const controllers: ControllerFactory[] = [modelPreheatController, servedModelController];
