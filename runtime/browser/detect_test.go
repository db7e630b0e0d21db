package browser

import (
	"os"
	"testing"
	"time"
)

// A Chromium that takes longer than the first bound to answer --version
// (a machine under load) is asked once more before it is called missing:
// a suite under -race on 2 cores reported "no Chromium" with one installed.
func TestSlowChromiumIsStillFound(t *testing.T) {
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv("PALYRA_FAKE_CHROMIUM_DELAY", "600ms")
	old := versionTimeouts
	t.Cleanup(func() { versionTimeouts = old })
	versionTimeouts = []time.Duration{200 * time.Millisecond, 20 * time.Second}
	if !usable(self) {
		t.Fatal("a Chromium slower than the first bound was called missing")
	}
	versionTimeouts = []time.Duration{200 * time.Millisecond}
	if usable(self) {
		t.Fatal("the stand-in answered within a bound it cannot meet: the test proves nothing")
	}
}
