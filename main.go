// Command palyra is both a Palyra mesh node and its CLI.
package main

import (
	"os"

	"github.com/palyra-mesh/palyra/cli"
)

func main() { os.Exit(cli.Main(os.Args)) }
