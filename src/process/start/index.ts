/**
 * The start path's first half: a request's spec validated, resolved once into the command to run
 * (program and argv, environment, working directory, identity, PTY, stdin), its limits held to the
 * daemon's caps, its record kept in the state directory, and a failed start told as such. The
 * process manager runs these in order; spawning is `spawn/`'s.
 *
 * @module
 */
export { resolveCommand, type CommandContext, type ProcessSpec, type ResolvedCommand } from "./command.js";
export { CommandLimitResolver, type CommandLimitPolicy } from "./command-limits.js";
export { createBaseEnvironment, defaultPath, identityEnvironment } from "./environment.js";
export { findProgramProblem } from "./program-lookup.js";
export { validateSessionId, validateSpec } from "./spec-validation.js";
export { spawnFailure, workingDirectoryRefusal } from "./start-failure.js";
export { commitStartRecord, reserveStartRecord } from "./start-record.js";
