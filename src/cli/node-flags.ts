/**
 * The Node (V8) flags the daemon runs with.
 *
 * `--initial-old-space-size=64`: V8 then never shrinks the old generation's collection limit below
 * 64 MB. Without it, a daemon streaming output sits in a band V8 handles badly: some 10 MB of live
 * old-space objects (just above the 8 MB where incremental marking starts at all), a new space grown
 * to its 32 MB by the output buffers, and a limit recomputed after each collection to barely above
 * the live size, so the next marking starts at once: 105 to 127 full collections per GiB of output
 * against 13 with the flag, and 2.8 against 1.4 ms of user CPU per MB (docs/PERFORMANCE.md). Only a
 * heap configuration flag does it: V8 reads it once, when the heap is made, so setting it later with
 * `v8.setFlagsFromString` changes nothing (measured), and Node refuses it in NODE_OPTIONS.
 */
export const daemonNodeFlags: readonly string[] = ["--initial-old-space-size=64"];

/** Flags that set the same heap sizes; an operator who gives one of them keeps their choice. */
const sameSettingFlags = ["--initial-old-space-size", "--initial_old_space_size", "--initial-heap-size", "--initial_heap_size"];

/** The flags of {@link daemonNodeFlags} that `execArgv` lacks (none when it sets an initial heap size itself). */
export function missingNodeFlags(execArgv: readonly string[]): string[] {
  const given = (name: string) => execArgv.some((argument) => argument === name || argument.startsWith(`${name}=`));
  if (sameSettingFlags.some(given)) return [];
  return daemonNodeFlags.filter((flag) => !given(flag.split("=")[0]!));
}
