package cli

import (
	"crypto/ed25519"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	ucli "github.com/urfave/cli/v2"

	"github.com/palyra-mesh/palyra/cli/client"
	"github.com/palyra-mesh/palyra/identity/skill"
)

// skillCommand holds the local package commands: making publisher keys,
// packing, signing and inspecting .palyra-skill files. They touch no
// cluster.
func skillCommand() *ucli.Command {
	return &ucli.Command{
		Name:  "skill",
		Usage: "signed skill packages: reusable tools as wasm modules with a manifest",
		Description: `A skill package (NAME.palyra-skill) is a ZIP holding skill.toml (the manifest),
   modules/*.wasm (one per tool, or shared), optional assets/, SHA256SUMS (every
   file's sha256) and signature.json (the publisher's Ed25519 signature over every
   file). Limits: 64 MiB in all, 16 MiB per file, 256 files.

   Make one:
     palyra skill keygen -o acme.key                       # prints the public key
     palyra skill pack ./echo -o echo.palyra-skill --key acme.key
     palyra skill inspect echo.palyra-skill --trust ed25519:…

   skill.toml:
     manifest_version = 1
     skill_id  = "acme.echo"          # PUBLISHER.NAME; a-z 0-9 . _ -
     name      = "Echo"
     version   = "1.0.0"              # semantic versioning
     publisher = "acme"               # must match the signature's

     [capabilities]                   # the most any run of these tools gets
     http_hosts    = ["api.example.com"]   # a host admits its subdomains; no wildcards
     allow_private = false                 # let them resolve to private addresses
     secrets       = ["api-token"]
     kv_prefix     = "echo/"
     fuel          = 100000000
     memory_mib    = 64
     wall_clock_ms = 30000

     [[tools]]
     id            = "echo"
     name          = "Echo"
     module        = "modules/echo.wasm"  # input on stdin, output on stdout
     input_schema  = '{"type":"object","required":["text"]}'
     output_schema = '{"type":"object"}'
     requires_approval = false
     deterministic     = false
     [tools.capabilities]             # optional: this tool's runs ask for these
     http_hosts = []                  # instead (a subset of the skill's; an
                                      # empty table: none, for a pure tool)

   Unknown fields are refused.

   Then, on the cluster:
     palyra skill trust add acme ed25519:…       # the publisher's key
     palyra skill install echo.palyra-skill      # once, from any node
     palyra skill run acme.echo echo --input '{"text":"hi"}' --wait   # from any node`,
		Subcommands: append([]*ucli.Command{skillKeygenCommand(), skillPackCommand(), skillSignCommand(), skillInspectCommand()},
			skillRegistryCommands()...),
	}
}

func skillKeygenCommand() *ucli.Command {
	return &ucli.Command{
		Name:  "keygen",
		Usage: "make a publisher key pair: the private key to a file, the public key printed",
		Description: `The private key (PEM, PKCS #8) is written with mode 0600 and never leaves
   this machine; give the printed public key to the operators who will trust
   your packages.`,
		Flags: []ucli.Flag{
			&ucli.StringFlag{Name: "out", Aliases: []string{"o"}, Usage: "write the private key to `FILE`", Required: true},
			&ucli.BoolFlag{Name: "force", Usage: "overwrite an existing key file"},
			jsonFlag,
		},
		Action: func(c *ucli.Context) error {
			out := c.String("out")
			flags := os.O_WRONLY | os.O_CREATE | os.O_EXCL
			if c.Bool("force") {
				flags = os.O_WRONLY | os.O_CREATE | os.O_TRUNC
			}
			pub, pemKey, err := skill.GenerateKey()
			if err != nil {
				return localFail(c, "internal", err.Error(), "")
			}
			f, err := os.OpenFile(out, flags, 0o600)
			if errors.Is(err, os.ErrExist) {
				return localFail(c, "already_exists", out+" exists", "choose another file, or add --force to replace it (packages signed with the old key then need re-signing)")
			}
			if err != nil {
				return localFail(c, "invalid_argument", err.Error(), "")
			}
			if _, err := f.Write(pemKey); err != nil {
				f.Close()
				return localFail(c, "internal", err.Error(), "")
			}
			if err := f.Close(); err != nil {
				return localFail(c, "internal", err.Error(), "")
			}
			if c.Bool("json") {
				return writeJSON(c.App.Writer, map[string]string{"public_key": skill.FormatPublicKey(pub), "private_key_file": out})
			}
			fmt.Fprintf(c.App.Writer, "%s\n", skill.FormatPublicKey(pub))
			where := "the line above is the public key"
			if !isTerminal(c.App.Writer) { // stdout went elsewhere: "above" is not on screen
				where = "the public key went to stdout"
			}
			fmt.Fprintf(c.App.ErrWriter, "private key written to %s (keep it private); %s\n", out, where)
			return nil
		},
	}
}

func skillPackCommand() *ucli.Command {
	return &ucli.Command{
		Name:      "pack",
		Usage:     "pack a skill directory into a .palyra-skill file (signed with --key)",
		ArgsUsage: "DIR",
		Description: `DIR holds skill.toml, modules/*.wasm and optionally assets/; anything else is
   refused so that nothing is packed by surprise. The file is the same bytes for
   the same contents. Without --key the package is unsigned; sign it later with
   'palyra skill sign'.`,
		Flags: []ucli.Flag{
			&ucli.StringFlag{Name: "out", Aliases: []string{"o"}, Usage: "write the package to `FILE` (default: SKILL_ID-VERSION.palyra-skill)"},
			&ucli.StringFlag{Name: "key", Usage: "sign with the publisher's private key in `FILE` (from 'palyra skill keygen')"},
			jsonFlag,
		},
		Action: func(c *ucli.Context) error {
			dir, err := oneArg(c, "skill directory")
			if err != nil {
				return err
			}
			p, err := skill.FromDir(dir)
			if err != nil {
				return localFail(c, "invalid_argument", err.Error(), "run 'palyra skill --help' for the layout and the manifest's fields")
			}
			if kf := c.String("key"); kf != "" {
				key, err := readSkillKey(kf)
				if err != nil {
					return localFail(c, "invalid_argument", err.Error(), "")
				}
				p.Sign(key)
			}
			out := c.String("out")
			if out == "" {
				out = p.Manifest.SkillID + "-" + p.Manifest.Version + skill.FileExt
			}
			return writePackage(c, p, out)
		},
	}
}

func skillSignCommand() *ucli.Command {
	return &ucli.Command{
		Name:      "sign",
		Usage:     "sign a .palyra-skill file (replacing any signature) as its manifest's publisher",
		ArgsUsage: "FILE",
		Flags: []ucli.Flag{
			&ucli.StringFlag{Name: "key", Usage: "the publisher's private key `FILE`", Required: true},
			&ucli.StringFlag{Name: "out", Aliases: []string{"o"}, Usage: "write the signed package to `FILE` (default: in place)"},
			jsonFlag,
		},
		Action: func(c *ucli.Context) error {
			file, err := oneArg(c, "package file")
			if err != nil {
				return err
			}
			p, err := readSkillFile(file)
			if err != nil {
				return localFail(c, "invalid_argument", err.Error(), "")
			}
			key, err := readSkillKey(c.String("key"))
			if err != nil {
				return localFail(c, "invalid_argument", err.Error(), "")
			}
			p.Sign(key)
			out := c.String("out")
			if out == "" {
				out = file
			}
			return writePackage(c, p, out)
		},
	}
}

func skillInspectCommand() *ucli.Command {
	return &ucli.Command{
		Name:      "inspect",
		Usage:     "check a .palyra-skill file (structure, sums, signature, audit) and show its manifest",
		ArgsUsage: "FILE",
		Description: `Exits non-zero when the package is malformed, the signature does not verify
   (or, with --trust, was made with another key), or the audit finds a problem
   (a module over 8 MiB or not WebAssembly, over 128 exports, WASI filesystem
   imports, wildcard or over-broad capabilities): a node would refuse or
   quarantine such a package.`,
		Flags: []ucli.Flag{
			&ucli.StringFlag{Name: "trust", Usage: "the publisher's public `KEY` (ed25519:…) the signature must be made with"},
			&ucli.BoolFlag{Name: "allow-unsigned", Usage: "do not fail on a package without a signature"},
			jsonFlag,
		},
		Action: func(c *ucli.Context) error {
			file, err := oneArg(c, "package file")
			if err != nil {
				return err
			}
			data, err := os.ReadFile(file)
			if err != nil {
				return localFail(c, "invalid_argument", err.Error(), "")
			}
			p, err := skill.Read(data)
			if err != nil {
				return localFail(c, "invalid_package", err.Error(), "")
			}
			var trusted ed25519.PublicKey
			if k := c.String("trust"); k != "" {
				if trusted, err = skill.ParsePublicKey(k); err != nil {
					return usageErr("--trust: %v", err)
				}
			}
			sigState := "unsigned"
			var sigErr error
			if p.Signature != nil || !c.Bool("allow-unsigned") {
				if _, sigErr = p.Verify(trusted); sigErr == nil {
					sigState = "valid (publisher " + p.Signature.Publisher + ", key " + p.Signature.PublicKey + ")"
					if trusted == nil {
						sigState += "; not checked against a trusted key (--trust)"
					}
				} else {
					sigState = "INVALID: " + sigErr.Error()
				}
			}
			findings := p.Audit()
			if c.Bool("json") {
				if err := writeJSON(c.App.Writer, map[string]any{
					"sha256": skill.Hash(data), "manifest": p.Manifest, "signature": sigState,
					"signed": p.Signature != nil, "signature_ok": sigErr == nil, "audit": nonNil(findings),
				}); err != nil {
					return err
				}
			} else {
				m := p.Manifest
				w := c.App.Writer
				fmt.Fprintf(w, "skill      %s %s (%s) by %s\n", m.SkillID, m.Version, m.Name, m.Publisher)
				fmt.Fprintf(w, "sha256     %s\n", skill.Hash(data))
				fmt.Fprintf(w, "signature  %s\n", sigState)
				cp := m.Capabilities
				fmt.Fprintf(w, "grants     http_hosts=%s allow_private=%v secrets=%s kv_prefix=%q %s\n",
					strings.Join(cp.HTTPHosts, ","), cp.AllowPrivate, strings.Join(cp.Secrets, ","), cp.KVPrefix, limitsText(cp.Fuel, cp.MemoryMiB<<20, cp.WallClockMS))
				for _, t := range m.Tools {
					flags := ""
					if t.RequiresApproval {
						flags += " requires_approval"
					}
					if t.Deterministic {
						flags += " deterministic"
					}
					fmt.Fprintf(w, "tool       %s (%s) %s%s\n", t.ID, t.Name, t.Module, flags)
					if c := t.Capabilities; c != nil {
						fmt.Fprintf(w, "           grants %s\n", toolGrantsText(c.HTTPHosts, c.AllowPrivate, c.Secrets, c.KVPrefix))
					}
				}
				if len(findings) == 0 {
					fmt.Fprintln(w, "audit      passed")
				}
				for _, f := range findings {
					fmt.Fprintf(w, "audit      FAILED %s\n", f)
				}
			}
			switch {
			case sigErr != nil:
				return ucli.Exit("", exitFailure)
			case len(findings) > 0:
				return ucli.Exit("", exitFailure)
			}
			return nil
		},
	}
}

func readSkillFile(file string) (*skill.Package, error) {
	data, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	return skill.Read(data)
}

func readSkillKey(file string) (ed25519.PrivateKey, error) {
	data, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("reading the publisher key: %w", err)
	}
	return skill.ParsePrivateKey(data)
}

// writePackage writes p to out atomically and reports what it wrote.
func writePackage(c *ucli.Context, p *skill.Package, out string) error {
	b, err := p.Bytes()
	if err != nil {
		return localFail(c, "internal", err.Error(), "")
	}
	tmp, err := os.CreateTemp(filepath.Dir(out), ".palyra-skill-*")
	if err != nil {
		return localFail(c, "invalid_argument", err.Error(), "")
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(b); err != nil {
		tmp.Close()
		return localFail(c, "internal", err.Error(), "")
	}
	if err := tmp.Close(); err != nil {
		return localFail(c, "internal", err.Error(), "")
	}
	if err := os.Rename(tmp.Name(), out); err != nil {
		return localFail(c, "internal", err.Error(), "")
	}
	signed := p.Signature != nil
	if c.Bool("json") {
		return writeJSON(c.App.Writer, map[string]any{"file": out, "sha256": skill.Hash(b), "bytes": len(b), "signed": signed,
			"skill_id": p.Manifest.SkillID, "version": p.Manifest.Version})
	}
	state := "unsigned"
	if signed {
		state = "signed by " + p.Signature.Publisher
	}
	fmt.Fprintf(c.App.Writer, "%s: %s %s, %d bytes, %s, sha256 %s\n", out, p.Manifest.SkillID, p.Manifest.Version, len(b), state, skill.Hash(b))
	return nil
}

// localFail reports an error of a command that runs without a cluster.
func localFail(c *ucli.Context, code, msg, hint string) error {
	return fail(c, &client.Error{Code: code, Message: msg, Hint: hint})
}
