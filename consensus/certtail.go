package consensus

import (
	"bytes"
	"crypto/x509"
	"sync"

	"github.com/hashicorp/raft"
	"google.golang.org/protobuf/proto"

	"github.com/palyra-mesh/palyra/proto/raftpb"
)

// The certificate records in this server's log past what it has applied.
//
// A server that restarts restores its last snapshot and applies nothing
// more until a leader tells it the commit index: its ledger stops at the
// snapshot. The leaves issued since (nodes that joined, devices paired)
// are recorded in entries it holds but has not applied, and a server that
// knows no leader refuses a leaf it cannot find, so it refused the very
// peers it needed to elect one: a cluster restored from a snapshot, whose
// every server held only the restore's snapshot, lost its quorum for good
// after two restarts. An entry in this log was written by a leader of the
// cluster (it came in an append from a peer this server had verified, or
// this server proposed it), so a leaf it records was signed by the
// cluster's CA service, committed or not.
type certTail struct {
	mu    sync.Mutex
	upTo  uint64              // entries up to this index are read
	certs map[string]tailCert // serial → record, for entries not yet applied
}

// tailCert is a record and the index of the entry that holds it: once
// that entry is applied, the ledger itself has the record and it goes.
type tailCert struct {
	rec   *raftpb.IssuedCert
	index uint64
}

// TailHasCert reports whether an entry of this server's log past its
// applied index records leaf for kind:id, or, for a node, a leaf of that
// node with the same key (nodes renew on their key).
func (s *Store) TailHasCert(leaf *x509.Certificate, kind, id string) bool {
	t := &s.tail
	t.mu.Lock()
	defer t.mu.Unlock()
	applied := s.fsm.State().AppliedIndex()
	last, err := s.bolt.LastIndex()
	if err != nil {
		return false
	}
	from := max(t.upTo, applied) + 1
	if first, err := s.bolt.FirstIndex(); err == nil && from < first {
		from = first
	}
	if t.certs == nil {
		t.certs = map[string]tailCert{}
	}
	for serial, c := range t.certs { // applied since: the ledger holds them
		if c.index <= applied {
			delete(t.certs, serial)
		}
	}
	for i := from; i <= last; i++ {
		var l raft.Log
		if err := s.bolt.GetLog(i, &l); err != nil || l.Type != raft.LogCommand {
			continue
		}
		var cmd raftpb.Command
		if proto.Unmarshal(l.Data, &cmd) != nil {
			continue
		}
		t.note(&cmd, i)
	}
	t.upTo = max(t.upTo, last)
	sum, serial := CertSum(leaf), leaf.SerialNumber.String()
	if c, ok := t.certs[serial]; ok && c.rec.Kind == kind && c.rec.Id == id && bytes.Equal(c.rec.CertSha256, sum) {
		return true
	}
	if kind != "node" {
		return false
	}
	ks := keySum(leaf)
	for _, c := range t.certs {
		if r := c.rec; r.Kind == kind && r.Id == id && len(r.SpkiSha256) > 0 && bytes.Equal(r.SpkiSha256, ks) {
			return true
		}
	}
	return false
}

// note keeps the certificate records of cmd, the entry at index (and of
// a batch's commands).
func (t *certTail) note(cmd *raftpb.Command, index uint64) {
	if b := cmd.GetBatch(); b != nil {
		for _, c := range b.Commands {
			t.note(c, index)
		}
	}
	for _, r := range cmd.GetRecordCerts().GetCerts() {
		t.certs[r.Serial] = tailCert{rec: r, index: index}
	}
}
