// Command ticker writes "tick N" to stdout and "tock N" to stderr, N from 1
// to the count given on stdin, pausing between lines (stdin: "COUNT
// PAUSE [PAD]", e.g. "5 200ms"; default "10 1s"). PAD, if given, is how
// many '.' follow "tick N" on each stdout line, for output large enough
// that a follower can fall behind. It shows 'palyra job logs -f'
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
	count, pause, pad := 10, time.Second, 0
	if f := strings.Fields(string(in)); len(f) == 2 || len(f) == 3 {
		d, err := time.ParseDuration(f[1])
		_, err2 := fmt.Sscan(f[0], &count)
		var err3 error
		if len(f) == 3 {
			_, err3 = fmt.Sscan(f[2], &pad)
		}
		if err != nil || err2 != nil || err3 != nil || pad < 0 {
			fmt.Fprintf(os.Stderr, "want COUNT PAUSE [PAD], e.g. \"5 200ms\"; got %q\n", in)
			os.Exit(2)
		}
		pause = d
	}
	dots := strings.Repeat(".", pad)
	for i := 1; i <= count; i++ {
		fmt.Printf("tick %d%s\n", i, dots)
		fmt.Fprintf(os.Stderr, "tock %d\n", i)
		if i < count {
			time.Sleep(pause)
		}
	}
}
