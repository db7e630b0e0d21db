package consensus

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"io"
	"math/big"
	"strings"
	"testing"
	"time"

	"github.com/palyra-mesh/palyra/proto/raftpb"
)

// leafAt is a self-signed stand-in for a leaf: the ledger reads only its
// serial, key and validity.
func leafAt(t *testing.T, serial int64, notBefore time.Time, life time.Duration) *x509.Certificate {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return leafOn(t, key, serial, notBefore, life)
}

func leafOn(t *testing.T, key *ecdsa.PrivateKey, serial int64, notBefore time.Time, life time.Duration) *x509.Certificate {
	t.Helper()
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(serial), NotBefore: notBefore, NotAfter: notBefore.Add(life)}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	c, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func record(at int64, certs ...*raftpb.IssuedCert) *raftpb.Command {
	return &raftpb.Command{Cmd: &raftpb.Command_RecordCerts{RecordCerts: &raftpb.RecordCerts{Certs: certs, AtMs: at}}}
}

func startLedger(at int64, complete bool) *raftpb.Command {
	return &raftpb.Command{Cmd: &raftpb.Command_StartCertLedger{StartCertLedger: &raftpb.StartCertLedger{AtMs: at, Complete: complete}}}
}

func TestCertLedger(t *testing.T) {
	t0 := time.UnixMilli(1_000_000_000_000)
	ms := t0.UnixMilli()
	node := leafAt(t, 1, t0, time.Hour)
	dev := leafAt(t, 2, t0, time.Hour)
	sameSerialOtherKey := leafAt(t, 2, t0, time.Hour)
	stranger := leafAt(t, 3, t0.Add(time.Minute), time.Hour)
	old := leafAt(t, 4, t0.Add(-time.Hour), 2*time.Hour) // issued before a restart

	f := NewFSM()
	st := f.State()
	// Before the ledger starts every leaf is accepted, as before it existed.
	if v, _ := st.CertStatus(stranger, "device", "d-x"); v != CertUnchecked {
		t.Fatalf("not started: verdict %v, want unchecked", v)
	}
	res := applyAll(t, f,
		record(ms, IssuedCertPB(node, "node", "n-1"), IssuedCertPB(dev, "device", "d-1")),
		startLedger(ms, true),
		startLedger(ms+1, true), // complete only once
		record(ms, IssuedCertPB(sameSerialOtherKey, "device", "d-2")),
		record(ms, &raftpb.IssuedCert{Serial: "9", Kind: "robot", Id: "r", CertSha256: make([]byte, 32)}),
	)
	for i, want := range []string{"", "", "started already", "already recorded", "malformed"} {
		got := ""
		if res[i].Err != nil {
			got = res[i].Err.Error()
		}
		if (want == "") != (got == "") || !strings.Contains(got, want) {
			t.Errorf("command %d: error %q, want %q", i, got, want)
		}
	}
	check := func(c *x509.Certificate, kind, id string, want CertVerdict) {
		t.Helper()
		if v, why := st.CertStatus(c, kind, id); v != want {
			t.Errorf("serial %s as %s:%s: verdict %v (%s), want %v", c.SerialNumber, kind, id, v, why, want)
		}
	}
	check(node, "node", "n-1", CertRecorded)
	check(dev, "device", "d-1", CertRecorded)
	check(node, "device", "d-1", CertMismatch)               // another principal's serial
	check(sameSerialOtherKey, "device", "d-1", CertMismatch) // the serial with another key
	check(stranger, "device", "d-x", CertUnknown)
	check(old, "device", "d-old", CertUnknown) // complete: nothing is grandfathered

	// A node renews on its key: a replica that has not applied the new
	// leaf's record knows it by the key. Another key, or a device, is not.
	nodeKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	applyAll(t, f, record(ms, IssuedCertPB(leafOn(t, nodeKey, 11, t0, time.Hour), "node", "n-2")))
	check(leafOn(t, nodeKey, 12, t0.Add(time.Minute), time.Hour), "node", "n-2", CertRecorded)
	check(leafOn(t, nodeKey, 13, t0.Add(time.Minute), time.Hour), "node", "n-1", CertUnknown) // another node
	check(leafAt(t, 14, t0.Add(time.Minute), time.Hour), "node", "n-2", CertUnknown)          // another key

	// Snapshots carry the ledger.
	f2 := NewFSM()
	if err := f2.Restore(io.NopCloser(bytes.NewReader(snapshotBytes(t, f)))); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(snapshotBytes(t, f2), snapshotBytes(t, f)) {
		t.Fatal("the ledger did not survive a snapshot")
	}
	if v, _ := f2.State().CertStatus(dev, "device", "d-1"); v != CertRecorded {
		t.Fatalf("restored ledger: verdict %v", v)
	}

	// A restart (restore, recover): a leaf issued before it is accepted
	// while valid, for at most the longest lifetime, if it names a member
	// not revoked that has had no leaf recorded since; later leaves must
	// be recorded.
	member := func(kind, id string) *raftpb.Command {
		return &raftpb.Command{Cmd: &raftpb.Command_AddMember{AddMember: &raftpb.AddMember{Member: &raftpb.Member{Kind: kind, Id: id, AddedAtMs: ms}}}}
	}
	applyAll(t, f, member("device", "d-old"), member("device", "d-gone"), member("device", "d-renews"),
		&raftpb.Command{Cmd: &raftpb.Command_RevokeMember{RevokeMember: &raftpb.RevokeMember{Kind: "device", Id: "d-gone", AtMs: ms}}},
		startLedger(ms+10, false))
	check(old, "device", "d-old", CertUnchecked)
	check(old, "device", "d-never-admitted", CertUnknown)
	check(old, "device", "d-gone", CertUnknown)
	check(stranger, "device", "d-x", CertUnknown) // issued after the restart
	check(leafAt(t, 5, t0.Add(-time.Hour), 91*24*time.Hour), "device", "d-old", CertUnknown)
	check(node, "device", "d-1", CertMismatch) // recorded ones are still checked
	check(old, "device", "d-renews", CertUnchecked)
	// A member registered since the restart (the restored node's operator)
	// has every leaf recorded: none of its is grandfathered.
	late := &raftpb.Command{Cmd: &raftpb.Command_AddMember{AddMember: &raftpb.AddMember{Member: &raftpb.Member{Kind: "device", Id: "d-late", AddedAtMs: ms + 15}}}}
	applyAll(t, f, late)
	check(old, "device", "d-late", CertUnknown)
	renewal := leafAt(t, 6, t0.Add(time.Second), time.Hour)
	applyAll(t, f, record(ms+20, IssuedCertPB(renewal, "device", "d-renews")))
	check(renewal, "device", "d-renews", CertRecorded)
	check(old, "device", "d-renews", CertUnknown) // renewed since: the old one is no longer taken
	// ... except for a while after the renewal (its answer may have been lost).
	if v, _ := st.certStatusAt(old, "device", "d-renews", ms+20+RenewedGraceMS/2); v != CertUnchecked {
		t.Errorf("a grandfathered leaf right after its member renewed: verdict %v, want unchecked", v)
	}

	// Expired leaves leave the ledger one lifetime (an hour at least, a
	// week at most) after they expire, with the next record.
	if n := st.IssuedCerts(); n != 4 {
		t.Fatalf("ledger holds %d, want 4", n)
	}
	applyAll(t, f, record(ms+2*time.Hour.Milliseconds(), IssuedCertPB(stranger, "device", "d-x")))
	if n := st.IssuedCerts(); n != 5 {
		t.Fatalf("an hour after expiry the ledger holds %d, want 5", n)
	}
	long := leafAt(t, 8, t0, 30*24*time.Hour)
	applyAll(t, f, record(ms+2*time.Hour.Milliseconds(), IssuedCertPB(long, "device", "d-z")))
	applyAll(t, f, record(ms+3*time.Hour.Milliseconds(), IssuedCertPB(leafAt(t, 7, t0.Add(3*time.Hour), time.Hour), "device", "d-y")))
	if n := st.IssuedCerts(); n != 2 {
		t.Fatalf("two hours after the hour-long leaves expired the ledger holds %d, want 2 (the month-long one, the new one)", n)
	}
	applyAll(t, f, record(ms+(30+6)*24*time.Hour.Milliseconds(), IssuedCertPB(leafAt(t, 9, t0.Add(36*24*time.Hour), time.Hour), "device", "d-w")))
	if n := st.IssuedCerts(); n != 2 {
		t.Fatalf("six days after the month-long leaf expired the ledger holds %d, want it and the new one", n)
	}
	applyAll(t, f, record(ms+(30+8)*24*time.Hour.Milliseconds(), IssuedCertPB(leafAt(t, 10, t0.Add(38*24*time.Hour), time.Hour), "device", "d-v")))
	if n := st.IssuedCerts(); n != 1 {
		t.Fatalf("eight days after the month-long leaf expired the ledger holds %d, want 1 (the new one)", n)
	}
	// Snapshots carry what was renewed since the restart.
	f3 := NewFSM()
	if err := f3.Restore(io.NopCloser(bytes.NewReader(snapshotBytes(t, f)))); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(snapshotBytes(t, f3), snapshotBytes(t, f)) {
		t.Fatal("the ledger did not survive a snapshot")
	}
}
