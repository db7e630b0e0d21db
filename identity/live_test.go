package identity

import (
	"crypto/x509"
	"testing"
	"time"
)

func TestRenewAtIgnoresBackdate(t *testing.T) {
	issued := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	leaf := &x509.Certificate{NotBefore: issued.Add(-certBackdate), NotAfter: issued.Add(6 * time.Second)}
	if got, want := RenewAt(leaf), issued.Add(4*time.Second); !got.Equal(want) {
		t.Fatalf("RenewAt = %v, want %v (two thirds of the 6s lifetime after issue)", got, want)
	}
	day := &x509.Certificate{NotBefore: issued.Add(-certBackdate), NotAfter: issued.Add(24 * time.Hour)}
	if got, want := RenewAt(day), issued.Add(16*time.Hour); !got.Equal(want) {
		t.Fatalf("RenewAt = %v, want %v", got, want)
	}
}
