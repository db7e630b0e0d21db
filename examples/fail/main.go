// Command fail is a Palyra example job that writes a message to stderr and
// exits with status 3. It exists to show (and test) how a failed job reports
// its exit code and the tail of its stderr.
package main

import (
	"fmt"
	"os"
)

func main() {
	fmt.Fprintln(os.Stderr, "fail: something went wrong on purpose")
	os.Exit(3)
}
