/**
 * The bounds of what a request may ask of the process manager, in one place: the manager enforces
 * them, and the RPC layer and clients may quote them.
 */

/** Longest process id and session id, in characters. */
export const maxIdLength = 256;
/** Longest command, argument or environment entry (`NAME=VALUE`), in UTF-8 bytes: Linux's MAX_ARG_STRLEN. */
export const maxArgumentBytes = 128 * 1024;
/** Most arguments of an argv-form command. */
export const maxArgumentCount = 4096;
/** Most environment variables a request may set. */
export const maxEnvironmentCount = 4096;
/** Most bytes of command, arguments and environment together (half of Linux's usual ARG_MAX). */
export const maxCommandLineBytes = 1024 * 1024;
/** Longest working directory, in UTF-8 bytes: PATH_MAX. */
export const maxPathBytes = 4096;
/** Longest TERM of a PTY command, in characters. */
export const maxTermLength = 64;
/** Largest PTY width and height, in cells. */
export const maxPtyDimension = 10_000;
/** Longest timeout, in milliseconds: what a Node timer can wait. */
export const maxTimeoutMs = 2 ** 31 - 1;
/** Most stdin bytes a process may have pending (accepted, not yet handed to the OS), `stdin_data` included: 8 MiB. */
export const maxPendingInputBytes = 8 * 1024 * 1024;
