package api

import (
	"crypto/x509"

	"github.com/palyra-mesh/palyra/consensus"
	"github.com/palyra-mesh/palyra/node/cluster"
	"github.com/palyra-mesh/palyra/proto/raftpb"
)

// State is what the API reads of the local replica. Every method is
// served from an index or a small plane of the FSM: no request walks the
// jobs ever submitted. *consensus.State implements it.
type State interface {
	AuthzState

	// Jobs and arrays.
	Job(id string) (consensus.Job, bool)
	IdempotentJob(key string, payload []byte) (consensus.Job, bool)
	Jobs(f consensus.JobFilter) []consensus.Job
	Array(id string) (consensus.Array, bool)
	Arrays(afterID string, limit int, newest bool) []consensus.Array
	Count(p consensus.Phase) uint64
	QueuedReady(kind string, nowMS int64, limit int) bool
	QueueAhead(id string, limit int) (int, bool)
	FirstQueuedTask(array string) (consensus.Job, bool)
	CountByPhase() map[consensus.Phase]uint64
	Retention() int64
	PrunedBefore() int64
	EndedBefore(beforeMS int64) uint64
	AppliedIndex() uint64

	// Identity plane.
	Pairings() []consensus.Pairing
	Members(kind string) []consensus.Member
	IsRevoked(kind, id string) bool
	IsSerialRevoked(serial string) bool
	Trust() consensus.TrustBundle
	CertLedgerStarted() (sinceMS int64, complete, started bool)
	CertStatus(c *x509.Certificate, kind, id string) (consensus.CertVerdict, string)
	IssuedCerts() int

	// Secrets (sealed).
	Secret(name string) (consensus.Secret, bool)
	Secrets() []consensus.Secret

	// The key-value store.
	KV(key string) ([]byte, bool)
	KVList(prefix, after string, limit, maxBytes int, keysOnly bool) ([]consensus.KVEntry, bool)

	// The skill registry.
	Skill(id string) (*raftpb.SkillRecord, bool)
	Skills() []*raftpb.SkillRecord
	Publisher(name string) (*raftpb.PublisherRecord, bool)
	Publishers() []*raftpb.PublisherRecord

	// Hooks.
	Hooks() []*raftpb.HookRecord
	HooksFor(event string) []*raftpb.HookRecord

	// The audit journal.
	Journal(afterSeq uint64, sinceMS int64, limit int) ([]*raftpb.AuditRecord, uint64, string, bool)
	JournalHead() (uint64, string)
	VerifyJournal() (int, uint64, string)
}

// AuthzState is what the authorizer reads: the stored policy, members,
// and a wake-up when the policy changes.
type AuthzState interface {
	Watch(topic string) <-chan struct{}
	Policy() consensus.Policy
	Member(kind, id string) (consensus.Member, bool)
	Job(id string) (consensus.Job, bool) // worker.report's resource
	Members(kind string) []consensus.Member
}

var _ State = (*consensus.State)(nil)

// StateRemoved is the state `palyra nodes`, `palyra ca status` and the
// members metric give a node revoked by 'palyra node remove' that is not
// alive: it cannot come back on its old certificate.
const StateRemoved = "removed"

// MemberState is a cluster member's state as every listing names it:
// gossip's alive, stopped, dead or left, or StateRemoved for a revoked node that is
// not alive.
func MemberState(st AuthzState, m cluster.Member) string {
	if st != nil && m.State != cluster.StateAlive {
		if rec, ok := st.Member("node", m.ID); ok && rec.Revoked {
			return StateRemoved
		}
	}
	return m.State
}
