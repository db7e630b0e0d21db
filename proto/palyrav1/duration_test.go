package palyrav1

import (
	"testing"
	"time"
)

func TestFormatRetention(t *testing.T) {
	for ms, want := range map[int64]string{86_400_000: "24h", 7 * 86_400_000: "7d", 5_400_000: "1h30m",
		3*86_400_000 + 43_200_000: "3d12h", 45_000: "45s", 1500: (1500 * time.Millisecond).String()} {
		if got := FormatRetention(ms); got != want {
			t.Errorf("FormatRetention(%d) = %q, want %q", ms, got, want)
		}
	}
}
