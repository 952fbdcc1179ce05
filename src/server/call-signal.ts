import { Code, ConnectError } from "@connectrpc/connect";

/** A call's signal joined with the daemon's shutdown signal; dispose it when the call ends. */
export interface CallSignal {
  /** Aborts when the call ends (cancel, deadline, disconnect) or the daemon shuts down. */
  readonly signal: AbortSignal;
  /** Detaches from the shutdown signal. Idempotent. */
  dispose(): void;
}

/**
 * Joins a call's signal with the daemon-lifetime shutdown signal. Unlike `AbortSignal.any`, whose
 * long-lived sources keep an entry per dependent signal on Node 20 (nodejs/node#55351), the listener
 * on the shutdown signal is removed by {@link CallSignal.dispose}, so nothing grows per call.
 */
export function createCallSignal(callSignal: AbortSignal, shutdownSignal: AbortSignal | undefined): CallSignal {
  if (shutdownSignal === undefined) return { signal: callSignal, dispose() {} };
  const controller = new AbortController();
  const onCall = () => controller.abort(callSignal.reason);
  const onShutdown = () => controller.abort(shutdownSignal.reason);
  const dispose = () => {
    callSignal.removeEventListener("abort", onCall);
    shutdownSignal.removeEventListener("abort", onShutdown);
  };
  if (callSignal.aborted) onCall();
  else if (shutdownSignal.aborted) onShutdown();
  else {
    callSignal.addEventListener("abort", onCall, { once: true });
    shutdownSignal.addEventListener("abort", onShutdown, { once: true });
    controller.signal.addEventListener("abort", dispose, { once: true });
  }
  return { signal: controller.signal, dispose };
}

/** Throws UNAVAILABLE ("the daemon is shutting down") once the shutdown signal has fired. */
export function throwIfShuttingDown(shutdownSignal: AbortSignal | undefined): void {
  if (shutdownSignal?.aborted) throw new ConnectError("the daemon is shutting down", Code.Unavailable);
}
