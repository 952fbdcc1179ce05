import type { OwnerNames } from "./file-stat.js";
import type { FileCalls } from "./native-calls.js";
import type { PathResolver } from "./resolve.js";
import type { TemporaryCommits } from "./temporaries.js";

/** Everything the file operations share: the roots and how paths are found beneath them, the calls, the owners' names. */
export interface FilesContext {
  /** Finds paths beneath the workspace roots. */
  readonly resolver: PathResolver;
  /** The system calls, with the `--user` user's identity. */
  readonly calls: FileCalls;
  /** Owner names for stats. */
  readonly names: OwnerNames;
  /** Most bytes a read sends of a file without a size. */
  readonly maxUnsizedReadBytes: number;
  /** Which recent writes replaced a file, for watches to report them as users see them. */
  readonly commits: TemporaryCommits;
}
