/**
 * Model registrations (the plugin's download + register, minutes for a multi-GB archive) run here, in the
 * background, so that a reconcile never waits for one: controller-runtime's rule is never to block Reconcile on
 * long external work. The reconcile starts a registration, reads its phase, and reads its result once it is done;
 * its end (and any progress message) calls `onChange` with the owner's key, which enqueues the ServedModel. An ended
 * registration is kept until `settle`: the reconcile settles it once a status write holds its outcome, so a pass
 * whose write is lost to a conflict leaves it for the next pass.
 *
 * A registration is keyed by (ServedModel uid, replica, version): starting one that runs already is a no-op, so
 * reconciles can ask as often as they like. At most `perOwner` registrations of one ServedModel
 * (`rollout.maxConcurrent`) and `global` of all of them run at once; the others wait in phase `Pending`. The
 * slots are shared between namespaces (FairQueue): one namespace holds at most `perNamespace` of them, and a free
 * slot goes to the waiting namespace that holds the fewest, so a namespace rolling out many large models cannot
 * keep another namespace's registration waiting for one of its downloads to end.
 */
import type { ReplicaPhase } from '../../api/index.ts';
import { FairQueue, namespaceOf } from '../../runtime/index.ts';

export type RegistrationPhase = Extract<ReplicaPhase, 'Pending' | 'Downloading'>;

export interface RegistrationId {
  /** ServedModel uid: a deleted and re-created object does not inherit registrations. */
  uid: string;
  /** The `namespace/name` key `onChange` is called with. */
  owner: string;
  replica: string;
  /** Wanted version and archive: a new spec starts a new registration. */
  version: string;
}

export type RegistrationState<R> =
  | { state: 'running'; phase: RegistrationPhase; since: number; message: string }
  | { state: 'done'; since: number; result: R; reported?: boolean }
  | {
      state: 'failed';
      since: number;
      error: unknown;
      reported?: boolean;
      /** How many runs of this registration failed in a row (settled ones included): the retry's back-off. */
      failures?: number;
    };

/** What a registration may say while it runs, e.g. that the replica is downloading for an earlier request. */
export type Progress = (message: string) => void;

/** `signal` aborts the run and its request; `stopping` asks it to finish the request in flight and start no other
 *  (the owner is being deleted). */
export type RegistrationRun<R> = (
  signal: AbortSignal,
  progress: Progress,
  stopping: AbortSignal,
) => Promise<R>;

export interface RegistrationRunnerOptions {
  /** Registrations in flight at once over all owners. */
  global: number;
  /** Registrations of one namespace in flight at once. Default: all but a quarter of `global`. */
  perNamespace?: number;
  /** Called when a registration ends or reports progress. */
  onChange: (owner: string) => void;
  now?: () => number;
}

interface Task<R> {
  id: RegistrationId;
  limit: number;
  /** Waiting for a slot (in the queue), not running. */
  waiting: boolean;
  run: RegistrationRun<R>;
  state: RegistrationState<R>;
  abort: AbortController;
  stopping: AbortController;
}

const tenantOf = (task: Task<unknown>) => namespaceOf(task.id.owner);

const keyOf = (id: RegistrationId) => `${id.uid}\u0000${id.replica}\u0000${id.version}`;

export class RegistrationRunner<R> {
  private readonly opts: Required<Omit<RegistrationRunnerOptions, 'perNamespace'>>;
  private readonly tasks = new Map<string, Task<R>>();
  /** Waiting tasks by namespace; its slots are the running ones. */
  private readonly queue: FairQueue<Task<R>>;
  private readonly running = new Map<string, number>();
  /** Failures in a row per registration key, kept across `settle` (a retry's back-off grows with them) until a
   *  run succeeds or the registration is dropped; one entry per registration the runner knows or settled failed. */
  private readonly streaks = new Map<string, number>();
  private stopped = false;

  constructor(opts: RegistrationRunnerOptions) {
    const { perNamespace, ...rest } = opts;
    this.opts = { now: Date.now, ...rest };
    this.queue = new FairQueue<Task<R>>({
      capacity: Math.max(1, opts.global),
      ...(perNamespace !== undefined ? { maxPerTenant: perNamespace } : {}),
    });
  }

  /** The registration's state, starting it when there is none. `perOwner` bounds the owner's registrations. */
  ensure(id: RegistrationId, perOwner: number, run: RegistrationRun<R>): RegistrationState<R> {
    const key = keyOf(id);
    const existing = this.tasks.get(key);
    if (existing) return existing.state;
    const task: Task<R> = {
      id,
      limit: Math.max(1, perOwner),
      waiting: true,
      run,
      state: { state: 'running', phase: 'Pending', since: this.opts.now(), message: 'waiting for a slot' },
      abort: new AbortController(),
      stopping: new AbortController(),
    };
    this.tasks.set(key, task);
    this.queue.push(tenantOf(task), task);
    this.pump();
    return task.state;
  }

  /** The registration's state without starting one. */
  peek(id: RegistrationId): RegistrationState<R> | undefined {
    return this.tasks.get(keyOf(id))?.state;
  }

  /** Forgets a finished registration once its result has been acted on (a later `ensure` starts a new one). */
  settle(id: RegistrationId): void {
    const task = this.tasks.get(keyOf(id));
    if (task && task.state.state !== 'running') this.tasks.delete(keyOf(id));
  }

  /** Marks an ended registration whose outcome was acted on (its Event recorded) but that is kept (not settled). */
  report(id: RegistrationId): void {
    const task = this.tasks.get(keyOf(id));
    if (task && task.state.state !== 'running') task.state = { ...task.state, reported: true };
  }

  /** Drops the registrations of `uid` whose replica is not in `keep` (all of them without `keep`), aborting runs. */
  prune(uid: string, keep?: ReadonlySet<string>, version?: string): void {
    for (const key of this.streaks.keys()) {
      const [u, replica, v] = key.split('\u0000');
      if (u !== uid || (keep?.has(replica!) && (version === undefined || v === version))) continue;
      this.streaks.delete(key);
    }
    for (const [key, task] of this.tasks) {
      if (task.id.uid !== uid) continue;
      if (keep && keep.has(task.id.replica) && (version === undefined || task.id.version === version))
        continue;
      this.drop(key, task);
    }
  }

  /**
   * Winds down the registrations of `uid` before it is unregistered (deletion): the ones waiting for a slot and the
   * ended ones are dropped; the running ones are told to start nothing more (`stopping`) but NOT aborted: a POST the
   * model server took goes on there when its client goes away, so only its answer says the model landed and may now
   * be unregistered. Returns how many still run; each one's end calls `onChange` as usual.
   */
  drain(uid: string): number {
    let running = 0;
    for (const [key, task] of this.tasks) {
      if (task.id.uid !== uid) continue;
      if (task.state.state === 'running' && !task.waiting) {
        task.stopping.abort();
        running++;
      } else this.drop(key, task);
    }
    return running;
  }

  /** How many registrations run (not wait) now, over all owners. */
  get inFlight(): number {
    return this.queue.held;
  }

  stop(): void {
    this.stopped = true;
    for (const [key, task] of this.tasks) this.drop(key, task);
  }

  private drop(key: string, task: Task<R>): void {
    this.tasks.delete(key);
    this.streaks.delete(key);
    if (task.waiting) this.queue.remove(tenantOf(task), task);
    task.abort.abort(new Error('registration no longer wanted'));
  }

  private pump(): void {
    const underOwnerLimit = (t: Task<R>) => (this.running.get(t.id.uid) ?? 0) < t.limit;
    while (!this.stopped) {
      const next = this.queue.next(underOwnerLimit);
      if (!next) return;
      next.item.waiting = false;
      this.launch(next.item);
    }
  }

  private launch(task: Task<R>): void {
    this.running.set(task.id.uid, (this.running.get(task.id.uid) ?? 0) + 1);
    const since = this.opts.now();
    task.state = {
      state: 'running',
      phase: 'Downloading',
      since,
      // The driver's first progress report says who downloads what (the server's plugin, the agent).
      message: 'the model is being downloaded',
    };
    // Not reported: a slot frees when another registration ends, which is reported already.
    const progress: Progress = (message) => {
      if (task.state.state === 'running' && task.state.message !== message) {
        task.state = { ...task.state, message };
        this.opts.onChange(task.id.owner);
      }
    };
    void (async () => {
      let state: RegistrationState<R>;
      try {
        state = {
          state: 'done',
          since: this.opts.now(),
          result: await task.run(task.abort.signal, progress, task.stopping.signal),
        };
        this.streaks.delete(keyOf(task.id));
      } catch (error) {
        const failures = (this.streaks.get(keyOf(task.id)) ?? 0) + 1;
        // A dropped task's streak is nobody's either (drop forgot it).
        if (this.tasks.get(keyOf(task.id)) === task) this.streaks.set(keyOf(task.id), failures);
        state = { state: 'failed', since: this.opts.now(), error, failures };
      }
      this.queue.release(tenantOf(task));
      const left = (this.running.get(task.id.uid) ?? 1) - 1;
      if (left > 0) this.running.set(task.id.uid, left);
      else this.running.delete(task.id.uid);
      task.state = state;
      // A dropped task's result is nobody's: only a task still registered reports.
      if (this.tasks.get(keyOf(task.id)) === task) this.opts.onChange(task.id.owner);
      this.pump();
    })();
  }
}
