// Command ticker writes "tick N" to stdout and "tock N" to stderr, N from 1
// to the count given on stdin, pausing between lines (stdin: "COUNT
// PAUSE", e.g. "5 200ms"; default "10 1s"). It shows 'palyra job logs -f'
// following a job's output as it is written.
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
	count, pause := 10, time.Second
	if f := strings.Fields(string(in)); len(f) == 2 {
		d, err := time.ParseDuration(f[1])
		if _, err2 := fmt.Sscan(f[0], &count); err != nil || err2 != nil {
			fmt.Fprintf(os.Stderr, "want COUNT PAUSE, e.g. \"5 200ms\"; got %q\n", in)
			os.Exit(2)
		}
		pause = d
	}
	for i := 1; i <= count; i++ {
		fmt.Printf("tick %d\n", i)
		fmt.Fprintf(os.Stderr, "tock %d\n", i)
		if i < count {
			time.Sleep(pause)
		}
	}
}
