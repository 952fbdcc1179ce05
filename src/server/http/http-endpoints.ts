import { cors } from "@connectrpc/connect";
import type { Registry } from "prom-client";
import { sandboxdVersion } from "../../shared/version.js";
import { createTokenCheck } from "../rpc/index.js";
import type { AnyRequest, AnyResponse } from "./early-answer.js";

/** Options for {@link createHttpEndpoints}. */
export interface HttpEndpointsOptions {
  /**
   * Origins whose browser pages may call the daemon (CORS), such as `https://ide.example.com`;
   * `*` for any. None by default: cross-origin calls are refused by the browser.
   */
  corsOrigins?: readonly string[];
  /** Whether the daemon takes new work: false once it shuts down (`/readyz` then answers 503). */
  ready(): boolean;
  /** `GET /metrics` in Prometheus text format from this registry; behind `token` when one is given. */
  metrics?: { registry: Registry; token?: string };
}

/** What {@link createHttpEndpoints} makes. */
export interface HttpEndpoints {
  /**
   * Answers what is not an RPC: `GET /healthz` (200 while the process serves), `GET /readyz` (200, or
   * 503 once shutting down), both with the daemon's version in a `sandboxd-version` header, `GET /metrics` and CORS preflights. Returns true when it answered.
   */
  answer(request: AnyRequest, response: AnyResponse): boolean;
  /** Adds the CORS headers an allowed origin's actual request needs to its response. */
  decorate(request: AnyRequest, response: AnyResponse): void;
}

/** Headers a browser may send besides connect's own: the bearer token. */
const extraAllowedHeaders = ["Authorization"];

/**
 * Creates the plain-HTTP endpoints for load balancers and probes that cannot speak gRPC, and the
 * CORS answers for browser pages on other origins, with the header lists `@connectrpc/connect`
 * exports for Connect and gRPC-Web.
 */
export function createHttpEndpoints(options: HttpEndpointsOptions): HttpEndpoints {
  const origins = new Set(options.corsOrigins ?? []);
  const metricsToken = options.metrics?.token === undefined ? undefined : createTokenCheck(options.metrics.token);
  const allowed = (origin: string | undefined) => origin !== undefined && (origins.has("*") || origins.has(origin));
  const originOf = (request: AnyRequest) =>
    typeof request.headers.origin === "string" ? request.headers.origin : undefined;
  return {
    answer(request, response) {
      const path = (request.url ?? "").split("?")[0];
      if (request.method === "GET" && (path === "/healthz" || path === "/readyz")) {
        const ok = path === "/healthz" || options.ready();
        (response as import("node:http").ServerResponse).writeHead(ok ? 200 : 503, {
          "content-type": "text/plain; charset=utf-8",
          "cache-control": "no-store",
          "sandboxd-version": sandboxdVersion,
        });
        response.end(ok ? "ok\n" : "shutting down\n");
        return true;
      }
      if (request.method === "GET" && path === "/metrics" && options.metrics !== undefined) {
        const { registry } = options.metrics;
        const reply = response as import("node:http").ServerResponse;
        if (metricsToken !== undefined && !metricsToken(request.headers.authorization)) {
          reply.writeHead(401, { "content-type": "text/plain; charset=utf-8", "www-authenticate": "Bearer" });
          reply.end("missing or invalid bearer token\n");
          return true;
        }
        registry.metrics().then(
          (text) => {
            reply.writeHead(200, { "content-type": registry.contentType, "cache-control": "no-store" });
            reply.end(text);
          },
          () => {
            reply.writeHead(500);
            reply.end();
          },
        );
        return true;
      }
      if (request.method === "OPTIONS") {
        const origin = originOf(request);
        const headers: Record<string, string> = { vary: "Origin" };
        if (allowed(origin)) {
          headers["access-control-allow-origin"] = origin!;
          headers["access-control-allow-methods"] = cors.allowedMethods.join(", ");
          headers["access-control-allow-headers"] = [...cors.allowedHeaders, ...extraAllowedHeaders].join(", ");
          headers["access-control-max-age"] = "7200";
        }
        (response as import("node:http").ServerResponse).writeHead(allowed(origin) ? 204 : 403, headers);
        response.end();
        return true;
      }
      return false;
    },
    decorate(request, response) {
      const origin = originOf(request);
      if (!allowed(origin)) return;
      response.setHeader("access-control-allow-origin", origin!);
      response.setHeader("access-control-expose-headers", cors.exposedHeaders.join(", "));
      response.setHeader("vary", "Origin");
    },
  };
}
