// Command spin is a Palyra example job that never ends: a call-free loop the
// compiler cannot remove. It exists to show (and test) that the wall-clock
// timeout stops a guest even when it never calls the host.
package main

import "os"

// counter is a package variable updated inside the loop so the loop has an
// observable effect and cannot be proven dead.
var counter uint64

func main() {
	// The bound comes from the argument count, which the compiler cannot
	// know, so it cannot prove the loop infinite or fold it away. With the
	// executor's single argument, limit is 0 and the loop never exits
	// (counter never wraps back to 0 before the timeout: 2^64 iterations).
	limit := uint64(len(os.Args) - 1)
	for {
		counter++
		if counter == limit {
			break
		}
	}
	os.Exit(int(counter & 1))
}
