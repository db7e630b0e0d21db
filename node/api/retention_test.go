package api

import (
	"strings"
	"testing"

	"connectrpc.com/connect"

	"github.com/palyra-mesh/palyra/proto/palyrav1"
)

// A retention is checked in milliseconds: one whose nanoseconds overflow
// (and would wrap around into range) is refused as out of range.
func TestSetRetentionOverflow(t *testing.T) {
	s, _, ctx := newOperatorServer(t)
	js := jobService{s}
	// 2^64 ns + 7 days, in ms: as a time.Duration it wraps to 7 days.
	const wraps = 18446744073709 + 7*24*3600*1000
	for _, ms := range []int64{wraps, 1 << 62, -1, 59_999, MaxRetention.Milliseconds() + 1} {
		_, err := js.SetRetention(ctx, connect.NewRequest(&palyrav1.SetRetentionRequest{RetentionMs: ms}))
		if pe := apiCode(t, err); connect.CodeOf(err) != connect.CodeInvalidArgument || !strings.Contains(pe.Message, "out of range") {
			t.Errorf("retention_ms %d: %v; want out of range", ms, err)
		}
	}
	if _, err := js.SetRetention(ctx, connect.NewRequest(&palyrav1.SetRetentionRequest{RetentionMs: 7 * 24 * 3600 * 1000})); err != nil {
		t.Fatalf("7d: %v", err)
	}
}
