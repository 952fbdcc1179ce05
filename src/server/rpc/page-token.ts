import { createHash, randomBytes } from "node:crypto";
import { sandboxError } from "./errors.js";

/** Records in a page of ListProcesses that asks for no size (`page_size` 0). */
export const defaultListPageSize = 1000;
/** Most records in a page of ListProcesses; a larger `page_size` is taken as this. */
export const maxListPageSize = 1000;

/** What a page token is bound to: the list's filter, and the daemon run that issued it. */
export interface PageScope {
  /** The session filter of the request. */
  sessionId: string;
  /** The status filter of the request, as sent (order does not matter). */
  statuses: readonly number[];
}

/**
 * PageTokens issues and reads the opaque `page_token` of ListProcesses. A token names the last record
 * of its page (by creation order) and is bound to the filter it was issued for and to this daemon run:
 * records and their order do not survive a restart. Tokens are base64url text; clients must not
 * look inside.
 */
export class PageTokens {
  /** Random per daemon run: a token of an earlier run is refused, not misread. */
  private readonly run = randomBytes(8).toString("hex");

  /** The token that continues after the record with `sequence`, for this scope. */
  issue(sequence: number, scope: PageScope): string {
    return Buffer.from(JSON.stringify({ after: sequence, scope: this.fingerprint(scope) })).toString("base64url");
  }

  /**
   * The sequence a token continues after, or undefined for the empty token (the first page). Throws
   * INVALID_ARGUMENT (field `page_token`) for a token that is malformed, of another daemon run, or
   * issued for another filter.
   */
  read(token: string, scope: PageScope): number | undefined {
    if (token === "") return undefined;
    const invalid = (why: string) =>
      sandboxError("INVALID_ARGUMENT", `invalid page_token: ${why}`, { metadata: { field: "page_token" } });
    let parsed: unknown;
    try {
      parsed = JSON.parse(Buffer.from(token, "base64url").toString("utf8"));
    } catch {
      throw invalid("not a token this daemon issued");
    }
    const { after, scope: fingerprint } = (parsed ?? {}) as { after?: unknown; scope?: unknown };
    if (typeof after !== "number" || !Number.isSafeInteger(after) || after < 0 || typeof fingerprint !== "string") {
      throw invalid("not a token this daemon issued");
    }
    if (fingerprint !== this.fingerprint(scope)) {
      throw invalid("it was issued for another filter or by another run of the daemon: ask for the first page again");
    }
    return after;
  }

  private fingerprint(scope: PageScope): string {
    const statuses = [...new Set(scope.statuses)].sort((a, b) => a - b);
    return createHash("sha256")
      .update(JSON.stringify([this.run, scope.sessionId, statuses]))
      .digest("base64url")
      .slice(0, 16);
  }
}

/**
 * The number of records a page holds for a requested `page_size`: {@link defaultListPageSize} for 0,
 * at most {@link maxListPageSize}. A negative size is INVALID_ARGUMENT (field `page_size`).
 */
export function pageSize(requested: number): number {
  if (requested < 0) {
    throw sandboxError("INVALID_ARGUMENT", `page_size must not be negative, got ${requested}`, {
      metadata: { field: "page_size" },
    });
  }
  return requested === 0 ? defaultListPageSize : Math.min(requested, maxListPageSize);
}
