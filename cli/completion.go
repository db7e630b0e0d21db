package cli

import (
	"fmt"

	ucli "github.com/urfave/cli/v2"
)

// bashCompletion asks palyra itself for the words that may follow (urfave's
// --generate-bash-completion), so it never goes stale.
const bashCompletion = `# palyra completion for bash: source it, or save it to
# /etc/bash_completion.d/palyra (zsh: 'palyra completion zsh').
_palyra() {
  local cur words
  cur="${COMP_WORDS[COMP_CWORD]}"
  words=$("${COMP_WORDS[0]}" "${COMP_WORDS[@]:1:$((COMP_CWORD-1))}" --generate-bash-completion 2>/dev/null)
  COMPREPLY=($(compgen -W "${words}" -- "${cur}"))
}
complete -o default -F _palyra palyra
`

func completionCommand() *ucli.Command {
	return &ucli.Command{
		Name:      "completion",
		Usage:     "print a shell completion script: bash, zsh or fish",
		ArgsUsage: "bash|zsh|fish",
		Description: `Load it in the current shell, or install it for good:

   bash:  source <(palyra completion bash)
          palyra completion bash > /etc/bash_completion.d/palyra
   zsh:   source <(palyra completion zsh)        (in ~/.zshrc)
   fish:  palyra completion fish > ~/.config/fish/completions/palyra.fish`,
		Action: func(c *ucli.Context) error {
			shell, err := oneArg(c, "shell (bash, zsh or fish)")
			if err != nil {
				return err
			}
			switch shell {
			case "bash":
				fmt.Fprint(c.App.Writer, bashCompletion)
			case "zsh":
				fmt.Fprint(c.App.Writer, "# palyra completion for zsh (through bash's completion support)\nautoload -U +X bashcompinit && bashcompinit\n"+bashCompletion)
			case "fish":
				script, err := c.App.ToFishCompletion()
				if err != nil {
					return err
				}
				fmt.Fprint(c.App.Writer, script)
			default:
				return ucli.Exit(fmt.Sprintf("error: no completion for shell %q\nchoose bash, zsh or fish", shell), exitUsage)
			}
			return nil
		},
	}
}
