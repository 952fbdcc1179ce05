import type { Client } from "@connectrpc/connect";
import type { FileService } from "../../../gen/sandbox/v1/files_pb.js";
import type { ReconnectSettings, SandboxError } from "../core/index.js";

/** What the file calls need from a running sandbox: its FileService client and its error boundary. */
export interface FilesContext {
  /** The FileService client of the running sandbox; throws SandboxError NOT_RUNNING when it is not running. */
  client(): Client<typeof FileService>;
  /**
   * Turns a failure into the SandboxError the caller gets (by the daemon's reason), and notes a
   * daemon that could not be reached, as every call of the sandbox does.
   */
  fail(error: unknown): SandboxError;
  /** How a read resumes after its stream broke: the sandbox's reconnect settings. */
  reconnect(): ReconnectSettings;
  /** Graceful GOAWAY frames seen so far on the sandbox's connection. */
  goAwayCount(): number;
}
