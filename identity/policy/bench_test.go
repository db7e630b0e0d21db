package policy

import "testing"

// BenchmarkAuthorize measures one decision under the default policy, on the
// path with a condition (a device cancelling its own job).
func BenchmarkAuthorize(b *testing.B) {
	e := defaultEngine(b)
	req := Request{Principal: plainDevice, Action: ActionJobCancel, Resource: JobResource("j-1", plainDevice.String(), "wasm"),
		Context: map[string]any{"job_kind": "wasm"}}
	b.ReportAllocs()
	for b.Loop() {
		if !e.Authorize(req).Allow {
			b.Fatal("denied")
		}
	}
}
