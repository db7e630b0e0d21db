// Command sleep waits for the duration given on stdin (e.g. "2s"; default
// 1s), then prints "slept <duration>". Tests use it for a job that is
// reliably still running when its node is killed.
package main

import (
	"fmt"
	"io"
	"os"
	"strings"
	"time"
)

func main() {
	in, _ := io.ReadAll(os.Stdin)
	d := time.Second
	if s := strings.TrimSpace(string(in)); s != "" {
		v, err := time.ParseDuration(s)
		if err != nil {
			fmt.Fprintf(os.Stderr, "bad duration %q: %v\n", s, err)
			os.Exit(2)
		}
		d = v
	}
	time.Sleep(d)
	fmt.Printf("slept %s", d)
}
