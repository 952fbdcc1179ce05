import { interceptOutcome } from "./call-outcome.js";
import { connectionKey } from "./call-context.js";
import { ConnectError, type Interceptor } from "@connectrpc/connect";
import { onAbort } from "../../shared/abort.js";
import { sandboxError } from "./errors.js";

/** Default largest request or response message, in bytes (4 MiB, gRPC's usual limit). */
export const defaultMaxMessageBytes = 4 * 1024 * 1024;
/** Default number of calls in progress on one connection. */
export const defaultMaxCallsPerConnection = 256;
/** Default number of calls in progress on the whole daemon. */
export const defaultMaxCalls = 4096;

/** Options for {@link createCallLimitInterceptor}. */
export interface CallLimitOptions {
  /** Calls (HTTP/2 streams) in progress on one connection. Default {@link defaultMaxCallsPerConnection}. */
  maxCallsPerConnection?: number;
  /** Calls in progress on the whole daemon. Default {@link defaultMaxCalls}. */
  maxCalls?: number;
  /** Services left out of the count (health probes must answer under load). Default: grpc.health.v1.Health. */
  exemptServices?: readonly string[];
}

/** The call counts of a {@link createCallLimitInterceptor}, for tests and metrics. */
export interface CallCounter {
  /** Calls in progress on the daemon. */
  readonly active: number;
}

/**
 * Creates a server interceptor that counts calls in progress, on each connection and in all, and
 * refuses a call beyond either limit with RESOURCE_EXHAUSTED and a message naming the limit. A
 * unary call counts until it returns; a stream until its context signal fires, which connect does
 * on completion, cancel, deadline and disconnect alike.
 */
export function createCallLimitInterceptor(options: CallLimitOptions = {}): {
  interceptor: Interceptor;
  counter: CallCounter;
} {
  const maxPerConnection = options.maxCallsPerConnection ?? defaultMaxCallsPerConnection;
  const maxCalls = options.maxCalls ?? defaultMaxCalls;
  const exempt = new Set(options.exemptServices ?? ["grpc.health.v1.Health"]);
  const perConnection = new WeakMap<object, number>();
  let active = 0;
  const counter = {
    get active() {
      return active;
    },
  };
  const interceptor: Interceptor = (next) => async (request) => {
    if (exempt.has(request.service.typeName)) return next(request);
    const connection = request.contextValues.get(connectionKey);
    const onConnection = connection === undefined ? 0 : (perConnection.get(connection) ?? 0);
    if (onConnection >= maxPerConnection) {
      throw sandboxError(
        "LIMIT_EXCEEDED",
        `too many calls on this connection: the limit of ${maxPerConnection} concurrent calls per connection is reached`,
        { metadata: { limit: "max-calls-per-connection", value: String(maxPerConnection) } },
      );
    }
    if (active >= maxCalls) {
      throw sandboxError("LIMIT_EXCEEDED", `too many calls: the limit of ${maxCalls} concurrent calls is reached`, {
        metadata: { limit: "max-calls", value: String(maxCalls) },
      });
    }
    active++;
    if (connection !== undefined) perConnection.set(connection, onConnection + 1);
    let released = false;
    const release = () => {
      if (released) return;
      released = true;
      active--;
      if (connection !== undefined) perConnection.set(connection, (perConnection.get(connection) ?? 1) - 1);
    };
    try {
      const response = await next(request);
      if (!response.stream) release();
      // The call's signal fires once, at its end, whatever the end: no listener outlives the call.
      else onAbort(request.signal, release);
      return response;
    } catch (error) {
      release();
      throw error;
    }
  };
  return { interceptor, counter };
}

/** Default longest error message sent to a client, in characters. */
export const defaultMaxErrorMessageLength = 1024;

/**
 * Creates a server interceptor that shortens error messages to `maxLength` characters, for unary
 * calls and streams alike. Messages may quote what the client sent (a process id, a directory), and
 * a message travels in an HTTP/2 trailer: an unbounded one would exceed the client's header list
 * limit and turn a clear status into a connection error.
 */
export function createErrorMessageLimitInterceptor(maxLength = defaultMaxErrorMessageLength): Interceptor {
  const shorten = (error: unknown): unknown => {
    if (!(error instanceof ConnectError) || error.rawMessage.length <= maxLength) return error;
    const shortened = new ConnectError(
      `${error.rawMessage.slice(0, maxLength)}...`,
      error.code,
      error.metadata,
      undefined,
      error.cause,
    );
    shortened.details.push(...error.details);
    return shortened;
  };
  return interceptOutcome(() => ({ mapError: shorten }));
}
