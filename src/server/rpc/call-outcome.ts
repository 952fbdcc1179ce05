import type { Interceptor } from "@connectrpc/connect";

/** What {@link interceptOutcome} calls for each call. */
export interface OutcomeHandlers {
  /** Replaces the error a call ends with (a unary call's throw, a stream's failure). Default: as it is. */
  mapError?(error: unknown): unknown;
  /**
   * Told once the call has ended: its error after `mapError`, or undefined, and whether its answer
   * was a stream (which ends when its messages do).
   */
  ended?(error: unknown, streaming: boolean): void;
}

/**
 * Creates an interceptor that sees how each call ends, unary or streaming alike: the one place that
 * wraps a stream's messages to learn of its end or failure. `handlers` is made per call.
 */
export function interceptOutcome(
  handlersFor: (request: Parameters<Parameters<Interceptor>[0]>[0]) => OutcomeHandlers,
): Interceptor {
  return (next) => async (request) => {
    const { mapError = (error: unknown) => error, ended } = handlersFor(request);
    let response;
    try {
      response = await next(request);
    } catch (error) {
      const mapped = mapError(error);
      ended?.(mapped, false);
      throw mapped;
    }
    if (!response.stream) {
      ended?.(undefined, false);
      return response;
    }
    const messages = response.message;
    return {
      ...response,
      message: (async function* () {
        let told = false;
        try {
          yield* messages;
        } catch (error) {
          const mapped = mapError(error);
          told = true;
          ended?.(mapped, true);
          throw mapped;
        } finally {
          // Also when the stream is let go of early (return(): the client reset it, a write failed).
          if (!told) ended?.(undefined, true);
        }
      })(),
    } as typeof response;
  };
}
