/**
 * Waiting for shared work (a single-flight read, a sign-in shared by every caller) with the caller's own signal:
 * the caller stops waiting when its signal aborts, the shared work goes on for the others. The `abort` listener
 * is removed as soon as the wait ends either way: the signals passed here are often process-long (a controller's),
 * and a listener left behind per call would pile up for the life of the process.
 */
export function abortable<T>(work: Promise<T>, signal: AbortSignal | undefined): Promise<T> {
  if (!signal) return work;
  if (signal.aborted) return Promise.reject(signal.reason);
  return new Promise<T>((resolve, reject) => {
    const onAbort = () => reject(signal.reason);
    signal.addEventListener('abort', onAbort, { once: true });
    work.then(
      (v) => {
        signal.removeEventListener('abort', onAbort);
        resolve(v);
      },
      (e: unknown) => {
        signal.removeEventListener('abort', onAbort);
        reject(e);
      },
    );
  });
}
