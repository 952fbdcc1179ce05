/**
 * Abort-signal plumbing in one place: linking signals, listening for an abort, and racing a wait
 * against one, each removing every listener it adds once it is done (as connect-es's
 * `createLinkedAbortController` does). Long-lived signals, such as a daemon's shutdown signal or a
 * client's lifetime signal, see many short waits: a listener left behind by each would grow without
 * bound, and `AbortSignal.any` keeps an entry per dependent signal on Node 20 (nodejs/node#55351).
 *
 * This module imports nothing, so the process manager, the server and the client all use it, and a
 * client loads it without loading the process manager (no native addon).
 */

/** Something that holds listeners until it is disposed. Disposing twice is a no-op. */
export interface AbortDisposable {
  /** Removes every listener added. Idempotent. */
  dispose(): void;
  /** The same as {@link dispose}, for `using` declarations. */
  [Symbol.dispose](): void;
}

/** A signal that aborts when any of its sources does: see {@link linkSignals}. */
export interface LinkedSignal extends AbortDisposable {
  /** Aborts, with the first source's reason, as soon as any source aborts (at once if one had). */
  readonly signal: AbortSignal;
  /** Aborts the linked signal by itself (sources are not touched), then disposes. */
  abort(reason?: unknown): void;
}

/**
 * Links signals: the result aborts with the reason of the first of `signals` to abort, or when its
 * own `abort` is called. Once it aborts, or once disposed, it listens to none of them any more:
 * dispose it when the work it guards ends, so a long-lived source keeps nothing per link. Undefined
 * entries are skipped.
 */
export function linkSignals(...signals: readonly (AbortSignal | undefined)[]): LinkedSignal {
  const controller = new AbortController();
  const sources = signals.filter((signal): signal is AbortSignal => signal !== undefined);
  const listeners: (() => void)[] = [];
  const dispose = () => {
    sources.forEach((source, index) => source.removeEventListener("abort", listeners[index]));
    listeners.length = 0;
  };
  const abort = (reason?: unknown) => {
    dispose();
    if (!controller.signal.aborted) controller.abort(reason);
  };
  const already = sources.find((source) => source.aborted);
  if (already !== undefined) {
    controller.abort(already.reason);
  } else {
    for (const source of sources) {
      const listener = () => abort(source.reason);
      listeners.push(listener);
      source.addEventListener("abort", listener, { once: true });
    }
  }
  return { signal: controller.signal, abort, dispose, [Symbol.dispose]: dispose };
}

/**
 * Calls `listener` with the signal's reason once `signal` aborts: at once (synchronously) when it
 * already has, never when `signal` is undefined. Dispose the result to stop listening.
 */
export function onAbort(signal: AbortSignal | undefined, listener: (reason: unknown) => void): AbortDisposable {
  let listening = false;
  const handler = () => {
    listening = false;
    listener(signal!.reason);
  };
  const dispose = () => {
    if (!listening) return;
    listening = false;
    signal!.removeEventListener("abort", handler);
  };
  if (signal?.aborted) listener(signal.reason);
  else if (signal !== undefined) {
    listening = true;
    signal.addEventListener("abort", handler, { once: true });
  }
  return { dispose, [Symbol.dispose]: dispose };
}

/**
 * Settles like `promise`, or rejects once `signal` aborts first: with `toError(reason)` when given,
 * else with the signal's reason. The promise itself is not cancelled; only the wait for it ends. The
 * listener is removed either way, so racing many promises against one long-lived signal keeps
 * nothing. Without a signal, returns `promise` as it is.
 */
export function raceSignal<T>(
  promise: PromiseLike<T>,
  signal: AbortSignal | undefined,
  toError?: (reason: unknown) => unknown,
): Promise<T> {
  if (signal === undefined) return Promise.resolve(promise);
  const fail = (reason: unknown) => (toError === undefined ? reason : toError(reason));
  if (signal.aborted) return Promise.reject(fail(signal.reason));
  return new Promise<T>((resolve, reject) => {
    const listening = onAbort(signal, (reason) => reject(fail(reason)));
    promise.then(
      (value) => {
        listening.dispose();
        resolve(value);
      },
      (error: unknown) => {
        listening.dispose();
        reject(error);
      },
    );
  });
}

/**
 * Resolves after `ms` milliseconds, or rejects with the signal's reason once it aborts first (at once
 * when it already has). The timer and the listener are both cleared either way.
 */
export function abortableDelay(ms: number, signal?: AbortSignal): Promise<void> {
  if (signal?.aborted) return Promise.reject(signal.reason);
  return new Promise<void>((resolve, reject) => {
    const listening = onAbort(signal, (reason) => {
      clearTimeout(timer);
      reject(reason);
    });
    const timer = setTimeout(() => {
      listening.dispose();
      resolve();
    }, ms);
  });
}
