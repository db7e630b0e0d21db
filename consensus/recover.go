package consensus

import (
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"

	"github.com/hashicorp/raft"

	"github.com/palyra-mesh/palyra/proto/raftpb"
)

// RecoverConfig says which stopped server to recover, and as whom.
type RecoverConfig struct {
	Dir     string // the server's raft directory
	NodeID  string // its raft id
	Address string // its advertised address
	// Commands, if set, returns commands to commit as the recovery's last
	// entries, given the state the server holds and the configuration it
	// last knew (e.g. revoking the voters that are gone for good).
	Commands func(st *State, old []ConfServer) []*raftpb.Command
	// DryRun reads and reports, and changes nothing.
	DryRun bool
	Logger *slog.Logger
}

// RecoverInfo is what a server held when it was recovered.
type RecoverInfo struct {
	LastIndex    uint64       // last entry in its log (or its snapshot)
	LastTerm     uint64       // that entry's term
	Servers      []ConfServer // the last configuration it knew
	AppliedIndex uint64       // the state's last command
	Jobs         int
	Appended     int // entries Commands added
}

// Recover turns the stopped server in cfg.Dir into the only voter of its
// cluster, keeping everything its log holds: the way out when a quorum is
// lost for good (Consul's and Nomad's peers.json). It replays the newest
// snapshot and every log entry into a state (entries not known to be
// committed included: they may have been, and nothing else holds them
// now), appends Commands' entries, and has raft.RecoverCluster write that
// as a snapshot whose configuration is {NodeID: voter}. The server then
// starts as a cluster of one and elects itself.
//
// Recovering forks the cluster's history: run it on one survivor, the
// most up to date, and never start the lost servers on their old data.
func Recover(cfg RecoverConfig) (RecoverInfo, error) {
	var info RecoverInfo
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	hl := newHCLogger(cfg.Logger.With("component", "raft"))
	bolt, err := openBolt(filepath.Join(cfg.Dir, "raft.db"))
	if err != nil {
		return info, fmt.Errorf("open raft log: %w", err)
	}
	defer bolt.Close()
	snaps, err := openSnapshots(cfg.Dir, hl, cfg.Logger)
	if err != nil {
		return info, fmt.Errorf("open snapshot store: %w", err)
	}
	if has, err := raft.HasExistingState(bolt, bolt, snaps); err != nil {
		return info, fmt.Errorf("inspect raft state: %w", err)
	} else if !has {
		return info, fmt.Errorf("no raft state in %s: there is nothing to recover", cfg.Dir)
	}

	fsm, servers, lastIndex, lastTerm, err := replay(bolt, snaps)
	if err != nil {
		return info, err
	}
	st := fsm.State()
	info = RecoverInfo{LastIndex: lastIndex, LastTerm: lastTerm, Servers: servers, AppliedIndex: st.AppliedIndex(), Jobs: st.JobCount()}
	if cfg.DryRun {
		return info, nil
	}
	if cfg.Commands != nil {
		cmds := cfg.Commands(st, servers)
		if err := appendCommands(bolt, lastIndex, lastTerm, cmds); err != nil {
			return info, err
		}
		info.Appended = len(cmds)
	}
	rc := raft.DefaultConfig()
	rc.LocalID = raft.ServerID(cfg.NodeID)
	rc.Logger = hl
	_, trans := raft.NewInmemTransport(raft.ServerAddress(cfg.Address))
	defer trans.Close()
	conf := raft.Configuration{Servers: []raft.Server{{Suffrage: raft.Voter, ID: rc.LocalID, Address: raft.ServerAddress(cfg.Address)}}}
	if err := raft.RecoverCluster(rc, NewFSM(), bolt, bolt, snaps, trans, conf); err != nil {
		return info, fmt.Errorf("recover raft: %w", err)
	}
	return info, nil
}

// replay rebuilds the state a stopped server holds: its newest readable
// snapshot, then every log entry after it. It also follows the
// configuration through the log.
func replay(logs raft.LogStore, snaps raft.SnapshotStore) (*FSM, []ConfServer, uint64, uint64, error) {
	fsm := NewFSM()
	var servers []ConfServer
	var index, term uint64
	list, err := snaps.List()
	if err != nil {
		return nil, nil, 0, 0, fmt.Errorf("list snapshots: %w", err)
	}
	var errs []error
	for _, m := range list {
		_, rc, err := snaps.Open(m.ID)
		if err == nil {
			err = fsm.Restore(rc) // closes rc
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("snapshot %s: %w", m.ID, err))
			fsm = NewFSM()
			continue
		}
		index, term, servers = m.Index, m.Term, confServers(m.Configuration)
		break
	}
	if len(list) > 0 && index == 0 {
		return nil, nil, 0, 0, fmt.Errorf("no snapshot could be read: %w", errors.Join(errs...))
	}
	first, err := logs.FirstIndex()
	if err != nil {
		return nil, nil, 0, 0, fmt.Errorf("read raft log: %w", err)
	}
	last, err := logs.LastIndex()
	if err != nil {
		return nil, nil, 0, 0, fmt.Errorf("read raft log: %w", err)
	}
	for i := max(first, index+1); i <= last && last > 0; i++ {
		var e raft.Log
		if err := logs.GetLog(i, &e); err != nil {
			return nil, nil, 0, 0, fmt.Errorf("read raft log entry %d: %w", i, err)
		}
		switch e.Type {
		case raft.LogCommand:
			fsm.Apply(&e)
		case raft.LogConfiguration:
			servers = confServers(raft.DecodeConfiguration(e.Data))
		}
		index, term = e.Index, e.Term
	}
	return fsm, servers, index, term, nil
}
