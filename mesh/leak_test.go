package mesh_test

import (
	"runtime"
	"time"
)

// stableGoroutines counts goroutines after letting exiting ones finish.
func stableGoroutines() int {
	runtime.GC()
	time.Sleep(10 * time.Millisecond)
	return runtime.NumGoroutine()
}
