package node

import (
	"fmt"
	"log/slog"
	"time"

	"github.com/palyra-mesh/palyra/consensus"
	"github.com/palyra-mesh/palyra/identity"
	"github.com/palyra-mesh/palyra/proto/raftpb"
)

// RecoverConfig says which stopped node to recover.
type RecoverConfig struct {
	DataDir string
	DryRun  bool // report what would happen; change nothing
	Logger  *slog.Logger
}

// RecoverResult says what a recovery found and did.
type RecoverResult struct {
	consensus.RecoverInfo
	NodeID   string
	Address  string
	WasVoter bool // this node voted in the configuration it last knew
	HoldsCA  bool // this node holds the cluster CA
	// Revoked are the other voters of the old configuration: revoked so
	// they can never rejoin with the history they hold (with DryRun:
	// those that would be).
	Revoked []string
}

// Recover makes the stopped node in cfg.DataDir a cluster of one, its
// only voter, keeping every job its log holds: the way out when a
// quorum of voters is lost for good. The other voters of its last
// configuration are revoked in the recovered cluster: were they to come
// back with their old data they could elect a leader of their own and
// overwrite this one's log. Non-voters keep their identities and rejoin
// by themselves. Start the node afterwards with 'palyra node start';
// join new nodes by pairing. See backup/DESIGN.md.
func Recover(cfg RecoverConfig) (RecoverResult, error) {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	l := Layout{Dir: cfg.DataDir}
	st, err := l.ReadState()
	if err != nil {
		return RecoverResult{}, err
	}
	unlock, err := l.lock()
	if err != nil {
		return RecoverResult{}, fmt.Errorf("%w; stop the node before recovering it", err)
	}
	defer unlock()
	res := RecoverResult{NodeID: st.NodeID, Address: st.Address}
	if kr, err := identity.OpenKeyring(l.CADir()); err == nil {
		res.HoldsCA = len(kr.Fingerprints()) > 0 // a voter's keyring; a non-voter's is empty
		_ = kr.Close()
	}
	var revoked []string
	info, err := consensus.Recover(consensus.RecoverConfig{
		Dir: l.RaftDir(), NodeID: st.NodeID, Address: st.Address, DryRun: cfg.DryRun, Logger: cfg.Logger,
		Commands: func(s *consensus.State, old []consensus.ConfServer) []*raftpb.Command {
			var cmds []*raftpb.Command
			at := time.Now().UnixMilli()
			for _, srv := range old {
				if !srv.Voter || srv.ID == st.NodeID {
					continue
				}
				m, ok := s.Member("node", srv.ID)
				if !ok || m.Revoked {
					continue
				}
				revoked = append(revoked, srv.ID)
				cmds = append(cmds, &raftpb.Command{Cmd: &raftpb.Command_RevokeMember{RevokeMember: &raftpb.RevokeMember{
					Kind: "node", Id: srv.ID, AtMs: at, By: "node recover on " + st.NodeID}}})
				// The local operator credentials made on the lost machines
				// go with them, as with 'node remove' and 'snapshot
				// restore' (they administered the rebuilt cluster).
				for _, d := range consensus.LocalOperatorsOf(s.Members("device"), m) {
					if !d.Revoked {
						cmds = append(cmds, &raftpb.Command{Cmd: &raftpb.Command_RevokeMember{RevokeMember: &raftpb.RevokeMember{
							Kind: "device", Id: d.ID, AtMs: at, By: "node recover on " + st.NodeID}}})
					}
				}
			}
			// Certificates recorded only in entries this node never
			// received are lost with them: the ledger accepts what was
			// issued before now until it expires.
			if _, _, started := s.CertLedgerStarted(); started {
				cmds = append(cmds, &raftpb.Command{Cmd: &raftpb.Command_StartCertLedger{StartCertLedger: &raftpb.StartCertLedger{
					AtMs: at, Reason: "node recover on " + st.NodeID + ": certificates issued before are accepted until they expire"}}})
			}
			return cmds
		},
	})
	res.RecoverInfo = info
	if err != nil {
		return res, err
	}
	for _, srv := range info.Servers {
		switch {
		case srv.ID == st.NodeID:
			res.WasVoter = srv.Voter
		case srv.Voter && cfg.DryRun:
			res.Revoked = append(res.Revoked, srv.ID)
		}
	}
	if cfg.DryRun {
		return res, nil
	}
	res.Revoked = revoked
	// A joined node contacts its seeds at start to join; it is now a
	// cluster of its own, and Join would refuse.
	st.Seeds = nil
	st.ReplicateBlobs = true // the lost nodes held copies; make new ones as nodes join
	if err := l.WriteState(st); err != nil {
		return res, fmt.Errorf("raft was recovered, but node.json could not be updated (remove its \"seeds\" by hand): %w", err)
	}
	cfg.Logger.Warn("recovered this node as a cluster of one", "node", st.NodeID, "last_index", info.LastIndex,
		"jobs", info.Jobs, "revoked", res.Revoked)
	return res, nil
}
