package node

import (
	"testing"
	"time"
)

// refused.json follows the node's verdict: written when the cluster
// refuses it (the first time seen kept while it lasts, the reason
// updated), gone once it does not; 'palyra doctor' reads it.
func TestRecordRefusal(t *testing.T) {
	l := Layout{Dir: t.TempDir()}
	if _, ok := l.ReadRefusal(); ok {
		t.Fatal("a refusal in a new data dir")
	}
	first := time.Date(2026, 11, 27, 4, 0, 0, 0, time.UTC)
	if err := l.recordRefusal(true, "every peer it tried refused its certificate", first); err != nil {
		t.Fatal(err)
	}
	if err := l.recordRefusal(true, "this node's registry entry is revoked", first.Add(time.Minute)); err != nil {
		t.Fatal(err)
	}
	r, ok := l.ReadRefusal()
	if !ok || !r.Since.Equal(first) || r.Because != "this node's registry entry is revoked" {
		t.Fatalf("refusal: %+v %v", r, ok)
	}
	for range 2 { // removing it twice is fine
		if err := l.recordRefusal(false, "", first.Add(2*time.Minute)); err != nil {
			t.Fatal(err)
		}
	}
	if _, ok := l.ReadRefusal(); ok {
		t.Fatal("the refusal outlived the node's verdict")
	}
}
