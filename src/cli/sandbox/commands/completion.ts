import { Command } from "commander";
import { exitCodes } from "../exit-codes.js";

/** Creates the `completion` command, which prints a shell completion script built from `program`'s own commands and flags. */
export function createCompletionCommand(finish: (code: number) => void, program: () => Command): Command {
  return new Command("completion")
    .summary("print a shell completion script (bash or zsh)")
    .description(
      "Print a script that completes sandbox's commands, their flags, and process ids (asked of the daemon at " +
        "--url or $SANDBOXD_URL) for logs, attach, kill and rm. Load it from your shell's start-up file:\n\n" +
        "  bash: source <(sandbox completion bash)      (in ~/.bashrc)\n" +
        "  zsh:  source <(sandbox completion zsh)       (in ~/.zshrc)",
    )
    .argument("[shell]", "bash or zsh", "bash")
    .action((shell: string) => {
      if (shell !== "bash" && shell !== "zsh") {
        process.stderr.write(`sandbox: no completion for ${JSON.stringify(shell).slice(1, -1)}: bash or zsh\n`);
        finish(exitCodes.usage);
        return;
      }
      process.stdout.write(completionScript(program(), shell));
      finish(exitCodes.ok);
    });
}

/** The words to complete after each command: its flags, and whether it takes process ids. */
function commandWords(program: Command): Map<string, { flags: string[]; ids: boolean }> {
  const words = new Map<string, { flags: string[]; ids: boolean }>();
  for (const command of program.commands) {
    const flags = command.options.flatMap((option) =>
      [option.short, option.long].filter((flag): flag is string => flag !== undefined),
    );
    const ids = command.registeredArguments.some((argument) => argument.name() === "id");
    words.set(command.name(), { flags: [...flags, "--help"], ids });
  }
  return words;
}

/**
 * A bash completion function for `sandbox` (zsh loads it through bashcompinit): command names
 * first, then the command's flags after a `-`, and for commands taking ids the ids of `sandbox ps -aq`.
 */
export function completionScript(program: Command, shell: "bash" | "zsh"): string {
  const words = commandWords(program);
  const cases = [...words]
    .map(([name, { flags, ids }]) => `    ${name}) flags=${shellWord(flags.join(" "))}; ids=${ids ? 1 : 0} ;;`)
    .join("\n");
  const script = `# sandbox completion for ${shell}: source <(sandbox completion ${shell})
_sandbox() {
  local current=\${COMP_WORDS[COMP_CWORD]} command="" flags="" ids=0 word
  for word in "\${COMP_WORDS[@]:1:COMP_CWORD-1}"; do
    case "$word" in -*) ;; *) command=$word; break ;; esac
  done
  if [ -z "$command" ]; then
    COMPREPLY=($(compgen -W ${shellWord([...words.keys(), "--help", "--version"].join(" "))} -- "$current"))
    return
  fi
  case "$command" in
${cases}
  esac
  if [[ "$current" == -* ]]; then
    COMPREPLY=($(compgen -W "$flags" -- "$current"))
  elif [ "$ids" = 1 ]; then
    COMPREPLY=($(compgen -W "$(sandbox ps -aq 2>/dev/null)" -- "$current"))
  fi
}
`;
  const register =
    shell === "zsh"
      ? "autoload -U +X bashcompinit && bashcompinit\ncomplete -F _sandbox sandbox\n"
      : "complete -F _sandbox sandbox\n";
  return script + register;
}

/** `text` in single quotes for a shell. */
function shellWord(text: string): string {
  return `'${text.replaceAll("'", `'\\''`)}'`;
}
