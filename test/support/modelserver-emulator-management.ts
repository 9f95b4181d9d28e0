/**
 * The model-server emulator's registrations and management API (ManagementRequestHandler, ApiUtils): register
 * (shared by the model API and the plugins), list, describe, scale, set-default, unregister. A layer of the
 * emulator's instance class, on top of its token authorization.
 */
import { EmulatorAuth } from './modelserver-emulator-auth.ts';
import {
  HttpError,
  type Reply,
  badRequest,
  notFound,
  sleep,
  versionNotFound,
} from './modelserver-emulator-http.ts';
import type { EmulatedModel } from './modelserver-emulator-types.ts';

function defaultModelName(fileName: string): string {
  const last = fileName.split('/').pop() ?? fileName;
  return last.replace(/\.(mar|tar\.gz|tgz|zip)$/, '');
}

export interface Registration {
  fileName: string;
  modelName?: string | undefined;
  runtime?: string | undefined;
  handler?: string | undefined;
  batchSize?: number | undefined;
  maxBatchDelay?: number | undefined;
  responseTimeout?: number | undefined;
  startupTimeout?: number | undefined;
  initialWorkers: number;
  synchronous: boolean;
}

export abstract class EmulatorModels extends EmulatorAuth {
  /** name → version → model; `defaults` holds the default version of each name. */
  protected models = new Map<string, Map<string, EmulatedModel>>();
  protected defaults = new Map<string, string>();
  private nextWorkerId = 9000;

  // ---- public API ----

  model(name: string): EmulatedModel[] {
    const versions = this.models.get(name);
    if (!versions) return [];
    const def = this.defaults.get(name);
    const list = [...versions.values()].map((m) => structuredClone(m));
    return list.sort((a, b) => Number(b.modelVersion === def) - Number(a.modelVersion === def));
  }

  defaultVersion(name: string): string | undefined {
    return this.defaults.get(name);
  }

  modelNames(): string[] {
    return [...this.models.keys()].sort();
  }

  // ---- registration ----

  protected parseRegistration(url: URL, fileParam: 'file_name' | 'url'): Registration {
    const q = url.searchParams;
    const int = (name: string): number | undefined => {
      const v = q.get(name);
      if (v === null) return undefined;
      const n = Number(v);
      if (!Number.isInteger(n)) throw badRequest(`Invalid ${name}: ${v}`);
      return n;
    };
    const sync = q.get('synchronous');
    return {
      fileName: q.get(fileParam) ?? '',
      modelName: q.get('model_name') ?? undefined,
      runtime: q.get('runtime') ?? undefined,
      handler: q.get('handler') ?? undefined,
      batchSize: int('batch_size'),
      maxBatchDelay: int('max_batch_delay'),
      responseTimeout: int('response_timeout'),
      startupTimeout: int('startup_timeout'),
      initialWorkers: int('initial_workers') ?? 0,
      // RegisterModelRequest: synchronous defaults to true.
      synchronous: sync === null ? true : sync.toLowerCase() === 'true',
    };
  }

  /** ApiUtils.handleRegister: conflict check, insert (first version becomes default), initial workers. */
  protected async register(r: Registration): Promise<{ status: number; message: string }> {
    await sleep(this.opts.registrationLatencyMs ?? 0);
    const rejected = this.opts.rejectArchive?.(r.fileName);
    if (rejected !== undefined) throw new HttpError(400, 'InvalidModelException', rejected);
    const fileName = r.fileName.split('/').pop() ?? r.fileName;
    const name = r.modelName ?? (this.opts.modelName ?? defaultModelName)(r.fileName);
    const v = this.opts.modelVersion;
    const version = typeof v === 'function' ? v(r.fileName) : (v ?? '1.0');
    let versions = this.models.get(name);
    if (versions?.has(version)) {
      this.stats.conflicts++;
      throw new HttpError(
        409,
        'ConflictStatusException',
        `Model version ${version} is already registered for model ${name}`,
      );
    }
    if (!versions) {
      versions = new Map();
      this.models.set(name, versions);
    }
    versions.set(version, {
      modelName: name,
      modelVersion: version,
      modelUrl: fileName,
      runtime: r.runtime ?? 'python',
      handler: r.handler,
      batchSize: r.batchSize ?? 1,
      maxBatchDelay: r.maxBatchDelay ?? 100,
      responseTimeout: r.responseTimeout ?? 120,
      startupTimeout: r.startupTimeout ?? 120,
      minWorkers: 0,
      maxWorkers: 0,
      workers: [],
      registeredAt: this.now(),
    });
    if (!this.defaults.has(name)) this.defaults.set(name, version);
    this.stats.registrations++;
    if (r.initialWorkers <= 0) {
      return {
        status: 200,
        message: `Model "${name}" Version: ${version} registered with 0 initial workers. Use scale workers API to add workers for the model.`,
      };
    }
    const scaled = await this.updateWorkers(name, version, r.initialWorkers, r.initialWorkers, r.synchronous);
    if (scaled.status === 200) {
      return {
        status: 200,
        message: `Model "${name}" Version: ${version} registered with ${r.initialWorkers} initial workers`,
      };
    }
    return scaled;
  }

  protected async handleModelApiRegister(url: URL): Promise<Reply> {
    this.stats.registrationAttempts++;
    const r = this.parseRegistration(url, 'url');
    if (r.fileName === '') throw badRequest('Parameter url is required.');
    const out = await this.register(r);
    return { status: out.status, json: { status: out.message } };
  }

  // ---- management calls ----

  protected handleList(url: URL): Reply {
    let limit = Number.parseInt(url.searchParams.get('limit') ?? '100', 10);
    let token = Number.parseInt(url.searchParams.get('next_page_token') ?? '0', 10);
    if (Number.isNaN(limit) || limit > 100 || limit < 0) limit = 100;
    if (Number.isNaN(token) || token < 0) token = 0;
    const names = [...this.defaults.keys()].sort();
    let last = token + limit;
    const body: { nextPageToken?: string; models: Array<{ modelName: string; modelUrl: string }> } = {
      models: [],
    };
    // ApiUtils.getModelList: the token is set whenever the page does not run past the end (also exactly at it).
    if (last > names.length) last = names.length;
    else body.nextPageToken = String(last);
    for (let i = token; i < last; i++) {
      const name = names[i]!;
      body.models.push({
        modelName: name,
        modelUrl: this.models.get(name)!.get(this.defaults.get(name)!)!.modelUrl,
      });
    }
    return {
      status: 200,
      json:
        body.nextPageToken !== undefined ? { nextPageToken: body.nextPageToken, models: body.models } : body,
    };
  }

  protected handleDescribe(name: string, version: string | undefined): Reply {
    const versions = this.models.get(name);
    if (!versions) throw notFound(`Model not found: ${name}`);
    let list: EmulatedModel[];
    if (version === 'all') list = [...versions.values()];
    else {
      const m = versions.get(version ?? this.defaults.get(name)!);
      if (!m) throw notFound(`Model not found: ${name}`);
      list = [m];
    }
    return { status: 200, json: list.map((m) => this.describe(m)) };
  }

  private describe(m: EmulatedModel): Record<string, unknown> {
    const now = this.now();
    return {
      modelName: m.modelName,
      modelVersion: m.modelVersion,
      modelUrl: m.modelUrl,
      runtime: m.runtime,
      minWorkers: m.minWorkers,
      maxWorkers: m.maxWorkers,
      batchSize: m.batchSize,
      maxBatchDelay: m.maxBatchDelay,
      maxRetryTimeoutInSec: 300,
      clientTimeoutInMills: 0,
      parallelType: '',
      parallelLevel: 0,
      deviceType: 'cpu',
      continuousBatching: false,
      useJobTicket: false,
      useVenv: false,
      stateful: false,
      responseTimeout: m.responseTimeout,
      startupTimeout: m.startupTimeout,
      loadedAtStartup: false,
      workers: m.workers.map((w) => ({
        id: w.id,
        startTime: w.startTime,
        // A starting worker shows UNLOADING (WorkerThread state != WORKER_MODEL_LOADED).
        status: now >= w.readyAt ? 'READY' : 'UNLOADING',
        memoryUsage: now >= w.readyAt ? 52_000_000 : 0,
        pid: w.pid,
        gpu: false,
        gpuUsage: 'N/A',
      })),
      jobQueueStatus: { remainingCapacity: 1000, pendingRequests: 0 },
    };
  }

  protected async handleScale(url: URL, name: string, version: string | undefined): Promise<Reply> {
    const q = url.searchParams;
    const intParam = (k: string, dflt: number): number => {
      const v = q.get(k);
      if (v === null) return dflt;
      const n = Number(v);
      if (!Number.isInteger(n)) throw badRequest(`Invalid ${k}: ${v}`);
      return n;
    };
    const min = intParam('min_worker', 1);
    const max = intParam('max_worker', min);
    const synchronous = (q.get('synchronous') ?? '').toLowerCase() === 'true';
    const out = await this.updateWorkers(name, version, min, max, synchronous);
    this.stats.scales++;
    return { status: out.status, json: { status: out.message } };
  }

  /** ApiUtils.updateModelWorkers. */
  private async updateWorkers(
    name: string,
    version: string | undefined,
    min: number,
    max: number,
    synchronous: boolean,
  ): Promise<{ status: number; message: string }> {
    if (max < min) throw badRequest('max_worker cannot be less than min_worker.');
    if (!this.defaults.has(name)) throw notFound(`Model not found: ${name}`);
    const m = this.models.get(name)!.get(version ?? this.defaults.get(name)!);
    if (!m) throw versionNotFound(name, version!);
    m.minWorkers = min;
    m.maxWorkers = max;
    const startMs = this.opts.workerStartMs ?? 50;
    while (m.workers.length > min) m.workers.pop();
    while (m.workers.length < min) {
      const now = this.now();
      m.workers.push({
        id: String(this.nextWorkerId++),
        startTime: new Date(now).toISOString(),
        readyAt: now + startMs,
        pid: 10_000 + Math.floor(Math.random() * 50_000),
      });
    }
    if (!synchronous) return { status: 202, message: 'Processing worker updates...' };
    const readyAt = Math.max(0, ...m.workers.map((w) => w.readyAt));
    const wait = readyAt - this.now();
    const cap = this.opts.syncScaleWaitMs ?? 10_000;
    await sleep(Math.min(Math.max(wait, 0), cap));
    if (wait > cap) return { status: 206, message: 'Workers scaling in progress...' };
    return {
      status: 200,
      message: `Workers scaled to ${min} for model: ${name}${version !== undefined ? `, version: ${version}` : ''}`,
    };
  }

  protected handleSetDefault(name: string, version: string): Reply {
    const versions = this.models.get(name);
    if (!versions) throw notFound(`Model not found: ${name}`);
    if (!versions.has(version)) throw versionNotFound(name, version);
    this.defaults.set(name, version);
    this.stats.setDefaults++;
    return {
      status: 200,
      json: { status: `Default vesion succsesfully updated for model "${name}" to "${version}"` },
    };
  }

  protected handleUnregister(name: string, version: string | undefined): Reply {
    const versions = this.models.get(name);
    if (!versions) throw notFound(`Model not found: ${name}`);
    const def = this.defaults.get(name)!;
    const v = version ?? def;
    if (!versions.has(v)) throw versionNotFound(name, v);
    if (v === def && versions.size > 1) {
      throw new HttpError(
        403,
        'InvalidModelVersionException',
        `Cannot remove default version for model ${name}`,
      );
    }
    versions.delete(v);
    if (versions.size === 0) {
      this.models.delete(name);
      this.defaults.delete(name);
    }
    this.stats.unregistrations++;
    return { status: 200, json: { status: `Model "${name}" unregistered` } };
  }
}
