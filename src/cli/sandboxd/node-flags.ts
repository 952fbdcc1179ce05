/**
 * The Node (V8) flags the daemon runs with. Both are heap configuration flags: V8 reads them once,
 * when the heap is made, so setting them later with `v8.setFlagsFromString` changes nothing
 * (measured); relaunch.ts restarts the daemon with them. Figures: docs/PERFORMANCE.md.
 *
 * `--initial-old-space-size=64`: V8 then never shrinks the old generation's collection limit below
 * 64 MB. Without it, a daemon streaming output sits in a band V8 handles badly: some 10 MB of live
 * old-space objects (just above the 8 MB where incremental marking starts at all) and a limit
 * recomputed after each collection to barely above the live size, so the next marking starts at
 * once: 105 to 127 full collections per GiB of output against 13 with the flag, and 2.8 against 1.4
 * ms of user CPU per MB. Node refuses this flag in NODE_OPTIONS.
 *
 * `--max-semi-space-size=4`: the young generation stops growing at 2 x 4 MB instead of 2 x 16 MB.
 * Each call's short-lived objects grow it to its maximum within a few hundred execs, and V8 keeps
 * it at that size long after the load is gone: RSS 5 s after 3,000 execs 163 -> 139 MB, CPU per MB
 * of output 2.5 -> 2.1 ms, CPU per exec unchanged within this machine's noise (2.6-3.0 ms either way).
 */
export const daemonNodeFlags: readonly string[] = ["--initial-old-space-size=64", "--max-semi-space-size=4"];

/** For each flag of {@link daemonNodeFlags}, the flags that set the same thing: an operator who gives one keeps their choice. */
const sameSetting: Readonly<Record<string, readonly string[]>> = {
  "--initial-old-space-size": [
    "--initial-old-space-size",
    "--initial_old_space_size",
    "--initial-heap-size",
    "--initial_heap_size",
  ],
  "--max-semi-space-size": ["--max-semi-space-size", "--max_semi_space_size"],
};

/**
 * The flags of {@link daemonNodeFlags} that neither `execArgv` (the process's own Node flags) nor
 * `nodeOptions` (the NODE_OPTIONS variable, which Node applies before the command line's) set.
 */
export function missingNodeFlags(execArgv: readonly string[], nodeOptions = ""): string[] {
  const given = [...execArgv, ...nodeOptions.split(/\s+/)];
  const has = (name: string) => given.some((argument) => argument === name || argument.startsWith(`${name}=`));
  return daemonNodeFlags.filter((flag) => {
    const name = flag.split("=")[0]!;
    return !(sameSetting[name] ?? [name]).some(has);
  });
}
