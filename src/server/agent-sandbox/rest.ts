import type http from "node:http";
import { Code, type ConnectError } from "@connectrpc/connect";
import {
  sendEarly,
  type AnyRequest,
  type AnyResponse,
  type HttpEndpoints,
  type RequestHandler,
} from "../http/index.js";
import { errorInfoOf } from "../rpc/index.js";

/**
 * A surface mounted on the REST port under `/v1/files/` (the file service's KEP-539.2 paths): it
 * answers a request it serves and returns true, or returns false to leave it to the next.
 */
export type RestMount = (request: AnyRequest, response: AnyResponse) => boolean;

/** Options for {@link createAgentSandboxRest}. */
export interface AgentSandboxRestOptions {
  /** Whether the daemon takes new work: false once it shuts down (`/v1/health` then answers 503). */
  ready(): boolean;
  /** The variables `GET /v1/metadata` serves (see `metadataEnvironment`). */
  metadata: Readonly<Record<string, string>>;
  /** The file surface, `GET`/`HEAD`/`PUT`/`DELETE /v1/files/{path}`; answered 404 until one is mounted. */
  files?: RestMount;
}

/** What {@link createAgentSandboxRest} makes: the parts of the REST port around the gate. */
export interface AgentSandboxRest {
  /** `GET /v1/health`, answered before the token check (probes carry none), after the Host check. */
  readonly endpoints: HttpEndpoints;
  /** Everything else, behind the gate: `/v1/metadata`, the files, 404 and 405 in the KEP's error shape. */
  readonly handler: RequestHandler;
  /** The gate's refusals (Host, token, limits) in the KEP's error shape, `{"code", "message"}`. */
  refuse(request: AnyRequest, response: AnyResponse, refusal: ConnectError): void;
}

/**
 * Creates the REST surface of KEP-539.2 (`packages/sandboxd/spec/filesystem/v1/filesystem.yaml` of
 * kubernetes-sigs/agent-sandbox) that is not the files: health, metadata, and errors as
 * `{"code": "NOT_FOUND", "message": "..."}` with the matching HTTP status. It sits behind the same
 * gate as every RPC (Host, token, limits), only `/v1/health` answering without the token.
 */
export function createAgentSandboxRest(options: AgentSandboxRestOptions): AgentSandboxRest {
  const startedAt = performance.now();
  const metadata = JSON.stringify({ env: options.metadata });
  return {
    endpoints: {
      answer(request, response) {
        if (pathOf(request) !== "/v1/health" || (request.method !== "GET" && request.method !== "HEAD")) return false;
        if (options.ready()) {
          sendJson(request, response, 200, {
            status: "ok",
            uptime_seconds: Math.floor((performance.now() - startedAt) / 1000),
          });
        } else {
          sendJson(request, response, 503, { code: "UNAVAILABLE", message: "sandboxd is shutting down" });
        }
        return true;
      },
      decorate() {},
    },
    handler(request, response) {
      const path = pathOf(request);
      if (path === "/v1/metadata") {
        if (request.method !== "GET" && request.method !== "HEAD")
          return sendError(
            request,
            response,
            405,
            "METHOD_NOT_ALLOWED",
            `${request.method} is not allowed on /v1/metadata`,
          );
        return sendText(request, response, 200, metadata);
      }
      if (path.startsWith("/v1/files/") && options.files?.(request, response)) return;
      sendError(request, response, 404, "NOT_FOUND", `no such endpoint: ${request.method} ${path}`);
    },
    refuse(request, response, refusal) {
      const code =
        errorInfoOf(refusal)?.reason === "HOST_NOT_ALLOWED"
          ? "PERMISSION_DENIED"
          : (restCodes[refusal.code] ?? "UNKNOWN");
      const body = Buffer.from(JSON.stringify({ code, message: refusal.rawMessage }));
      const headers: Record<string, string> = { "content-type": "application/json" };
      if (refusal.code === Code.Unauthenticated) headers["www-authenticate"] = "Bearer";
      sendEarly(request, response, statusOf[refusal.code] ?? 500, headers, body);
    },
  };
}

/** The codes the gate refuses with: the KEP's `code` string of each. */
const restCodes: Partial<Record<Code, string>> = {
  [Code.PermissionDenied]: "PERMISSION_DENIED",
  [Code.ResourceExhausted]: "RESOURCE_EXHAUSTED",
  [Code.Unauthenticated]: "UNAUTHENTICATED",
};
/** The HTTP status of each. */
const statusOf: Partial<Record<Code, number>> = {
  [Code.PermissionDenied]: 403,
  [Code.ResourceExhausted]: 429,
  [Code.Unauthenticated]: 401,
};

function pathOf(request: AnyRequest): string {
  return (request.url ?? "").split("?")[0];
}

function sendError(request: AnyRequest, response: AnyResponse, status: number, code: string, message: string): void {
  sendJson(request, response, status, { code, message });
}

function sendJson(request: AnyRequest, response: AnyResponse, status: number, body: unknown): void {
  sendText(request, response, status, JSON.stringify(body));
}

function sendText(request: AnyRequest, response: AnyResponse, status: number, text: string): void {
  const body = Buffer.from(text);
  const reply = response as http.ServerResponse;
  reply.writeHead(status, {
    "content-type": "application/json",
    "content-length": String(body.length),
    "cache-control": "no-store",
  });
  reply.end(request.method === "HEAD" ? undefined : body);
}
