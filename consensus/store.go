package consensus

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"
	"google.golang.org/protobuf/proto"

	"github.com/palyra-mesh/palyra/proto/raftpb"
)

// Config configures a Store.
type Config struct {
	Dir       string           // raft directory: raft.db (bbolt log+stable store) and snapshots/
	NodeID    string           // this server's raft ID (the node id)
	Advertise string           // address peers dial to reach this server's Layer
	Layer     raft.StreamLayer // transport for raft RPCs (QUIC streams in production)
	// Bootstrap makes a fresh store (no raft state on disk) a single-voter
	// cluster of itself. Ignored when state exists: restarts resume.
	Bootstrap bool
	Logger    *slog.Logger
	// Tune, when set, adjusts the raft configuration (tests shorten timers).
	Tune func(*raft.Config)
	// Refused, when set and true, says the cluster refuses this node (it
	// was removed): raft's warnings and errors, its elections that cannot
	// win, are logged at debug (the node says what happened itself).
	Refused *atomic.Bool
	// SnapshotAfterBytes: a snapshot is taken once this many command bytes
	// were applied since the last one, however few entries (0: 256 MiB).
	SnapshotAfterBytes uint64
}

// commitTimeout bounds how long a follower waits to learn that an entry
// it holds was committed, when no further entries flow: raft sends the
// commit index after a random 1–2× this. 1 ms is the least raft accepts;
// each job waits for it twice (its placement reaching a follower's worker,
// its result reaching a follower's watcher), so it is a visible part of a
// job's latency on a quiet cluster (consensus/DESIGN.md).
var commitTimeout = time.Millisecond

// The log cache in front of bbolt (see logcache.go): the most recent
// entries, up to this many and this many bytes of commands.
const (
	logCacheEntries = 4096
	logCacheBytes   = 64 << 20
)

// clockWarnMS is how far behind the cluster clock this server's clock may
// be before its proposals say so in the log.
const clockWarnMS = 1000

// Store is one server of the replicated control plane.
type Store struct {
	lastClockWarn atomic.Int64 // Unix ms of the last clock warning
	cfg           Config
	raft          *raft.Raft
	fsm           *FSM
	bolt          *raftboltdb.BoltStore
	transport     *gatedTransport
	log           *slog.Logger
	stop          chan struct{} // closed by Close
	stopOnce      sync.Once
	closing       *atomic.Bool                  // set by Close: raft's errors from its own shutdown are expected
	hookRules     atomic.Pointer[func() uint32] // SetHookRules
	tail          certTail                      // TailHasCert
}

// SetHookRules sets how this server learns the hook rules it may propose
// entries under: HookRules once every member applies them, 0 before (an
// older replica ignores Command.hook_rules and would queue different hook
// jobs). Propose stamps the answer on every entry, replacing whatever the
// proposer set. Until it is set, entries carry 0 and fire hooks as
// before HookRules.
func (s *Store) SetHookRules(rules func() uint32) {
	if rules == nil {
		s.hookRules.Store(nil)
		return
	}
	s.hookRules.Store(&rules)
}

// Open opens (or creates) the raft state in cfg.Dir and starts the server.
func Open(cfg Config) (*Store, error) {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.NodeID == "" || cfg.Layer == nil {
		return nil, errors.New("consensus: NodeID and Layer are required")
	}
	if err := os.MkdirAll(cfg.Dir, 0o700); err != nil {
		return nil, fmt.Errorf("create raft dir: %w", err)
	}
	lg := cfg.Logger.With("component", "raft")
	closing := new(atomic.Bool)
	hl := hclog.New(&hclog.LoggerOptions{Name: "raft", Level: hclog.Info,
		Output: &slogWriter{l: lg, closing: closing, refused: cfg.Refused}, DisableTime: true})

	bolt, err := openBolt(filepath.Join(cfg.Dir, "raft.db"))
	if err != nil {
		return nil, fmt.Errorf("open raft log %s: %w (is another palyra node using this data dir?)", filepath.Join(cfg.Dir, "raft.db"), err)
	}
	snaps, err := openSnapshots(cfg.Dir, hl, lg)
	if err != nil {
		bolt.Close()
		return nil, fmt.Errorf("open snapshot store: %w", err)
	}
	transport := &gatedTransport{NetworkTransport: raft.NewNetworkTransportWithConfig(&raft.NetworkTransportConfig{
		Stream:  cfg.Layer,
		MaxPool: 3,
		Timeout: 10 * time.Second,
		Logger:  hl,
		// No pipelined replication: in raft v1.7 a rejected append can
		// leave the pipeline's sender and decoder blocked on each other for
		// good (the follower gets no more entries; Shutdown hangs). Its
		// benefit is small on a LAN (hashicorp/raft#541).
		MaxRPCsInFlight: 1,
	}), quiet: newQuietAppends(time.Now)}

	rc := raft.DefaultConfig()
	rc.LocalID = raft.ServerID(cfg.NodeID)
	rc.Logger = hl
	rc.SnapshotThreshold = 4096
	rc.TrailingLogs = 8192
	// Followers learn a commit index from the next AppendEntries; when
	// commits pause, raft sends one after CommitTimeout (default 50ms).
	// A placement or result applied on a follower waits for exactly that,
	// so it is short here (see DESIGN.md: measured against a leader push).
	rc.CommitTimeout = commitTimeout
	// raft reports some metrics twice: labelled by peer, and again with
	// the peer's id in the metric's name (one name per peer, which
	// Prometheus users cannot aggregate). Keep the labelled ones.
	rc.NoLegacyTelemetry = true
	if cfg.Tune != nil {
		cfg.Tune(rc)
	}

	fsm := NewFSM()
	fsm.onUnknown = (&unknownLog{log: lg}).report
	if cfg.Bootstrap {
		has, err := raft.HasExistingState(bolt, bolt, snaps)
		if err != nil {
			transport.Close()
			bolt.Close()
			return nil, fmt.Errorf("inspect raft state: %w", err)
		}
		if !has {
			conf := raft.Configuration{Servers: []raft.Server{{
				Suffrage: raft.Voter, ID: rc.LocalID, Address: raft.ServerAddress(cfg.Advertise),
			}}}
			if err := raft.BootstrapCluster(rc, bolt, bolt, snaps, transport, conf); err != nil {
				transport.Close()
				bolt.Close()
				return nil, fmt.Errorf("bootstrap raft: %w", err)
			}
			lg.Info("bootstrapped a new single-voter cluster", "id", cfg.NodeID)
		}
	}
	r, err := raft.NewRaft(rc, fsm, newLogCache(bolt, logCacheEntries, logCacheBytes), bolt, snaps, transport)
	if err != nil {
		transport.Close()
		bolt.Close()
		return nil, fmt.Errorf("start raft: %w", err)
	}
	st := &Store{cfg: cfg, raft: r, fsm: fsm, bolt: bolt, transport: transport, log: lg, stop: make(chan struct{}), closing: closing}
	go st.adaptSnapshots(rc.SnapshotThreshold, st.stop)
	return st, nil
}

// State is the local replica's state (possibly stale on a follower).
func (s *Store) State() *State { return s.fsm.State() }

// Raft exposes the raft server for wiring that needs it (membership, autopilot).
func (s *Store) Raft() *raft.Raft { return s.raft }

// Apply commits cmd through raft and returns the FSM's result. It returns
// only after the command is committed and applied locally, so a nil error
// means the change is durable on a quorum.
//
// What is committed carries this server's clock as the command's time
// (the leader takes the time of every command, see clock.go) and its hook
// rules (SetHookRules); cmd itself is not changed.
func (s *Store) Apply(ctx context.Context, cmd *raftpb.Command) (Job, error) {
	res, err := s.Propose(ctx, cmd)
	if err != nil {
		return Job{}, err
	}
	return res.Job, res.Err
}

// Propose is Apply returning the FSM's whole result: for a CommandBatch,
// each command's outcome is in ApplyResult.Each. The error is raft's (the
// entry did not commit, or may not have); the FSM's verdicts are in the
// result.
func (s *Store) Propose(ctx context.Context, cmd *raftpb.Command) (ApplyResult, error) {
	now := time.Now().UnixMilli()
	if behind := s.fsm.State().ClockMS() - now; behind > clockWarnMS {
		s.warnClock(behind)
	}
	stamped := stampLeaderTime(cmd, now) // a copy: cmd may be sent again
	stamped.HookRules = 0
	if f := s.hookRules.Load(); f != nil {
		stamped.HookRules = (*f)()
	}
	data, err := proto.Marshal(stamped)
	if err != nil {
		return ApplyResult{}, fmt.Errorf("encode command: %w", err)
	}
	timeout := 10 * time.Second
	if d, ok := ctx.Deadline(); ok {
		timeout = time.Until(d)
		if timeout <= 0 {
			return ApplyResult{}, ctx.Err()
		}
	}
	f := s.raft.Apply(data, timeout)
	if err := f.Error(); err != nil {
		return ApplyResult{}, s.raftErr(err)
	}
	res, ok := f.Response().(ApplyResult)
	if !ok {
		return ApplyResult{}, fmt.Errorf("unexpected apply response %T", f.Response())
	}
	return res, nil
}

// raftErr turns raft's errors into ones that say what to do.
func (s *Store) raftErr(err error) error {
	addr, id := s.raft.LeaderWithID()
	switch {
	case errors.Is(err, raft.ErrLeadershipLost):
		return errf(ErrUnknownOutcome, "check whether it took effect before doing it again, unless doing it twice is harmless",
			"leadership was lost while committing; the change may or may not have been committed")
	case errors.Is(err, raft.ErrLeadershipTransferInProgress):
		// Still the leader, handing over: naming itself as the leader to
		// go to (as below) sent callers back here.
		return errf(ErrNotLeader, "retry in a moment; the request goes to the next leader",
			"this node is handing leadership over to another voter")
	case errors.Is(err, raft.ErrNotLeader):
		if id == "" {
			return errf(ErrNoQuorum, "wait for the cluster to elect a leader; check 'palyra status' on the other nodes",
				"no leader: this node cannot reach a quorum")
		}
		return errf(ErrNotLeader, "retry; the request is forwarded to the leader", "not the leader; leader is %s at %s", id, addr)
	case errors.Is(err, raft.ErrEnqueueTimeout):
		return errf(ErrNoQuorum, "check that a majority of voters is up and reachable",
			"commit timed out: no quorum (last leader seen: %q)", string(id))
	case errors.Is(err, raft.ErrRaftShutdown):
		return errf(ErrNoQuorum, "the node is shutting down; retry on another node", "raft is shut down")
	}
	return fmt.Errorf("raft: %w", err)
}

// LogRange is the first and last index of the raft log on disk (0, 0 when
// it is empty).
func (s *Store) LogRange() (first, last uint64, err error) {
	if first, err = s.bolt.FirstIndex(); err != nil {
		return 0, 0, err
	}
	last, err = s.bolt.LastIndex()
	return first, last, err
}

// IsLeader reports whether this server is the raft leader now.
func (s *Store) IsLeader() bool { return s.raft.State() == raft.Leader }

// Leader returns the current leader's address and id, empty when unknown.
func (s *Store) Leader() (addr, id string) {
	a, i := s.raft.LeaderWithID()
	return string(a), string(i)
}

// VerifyLeader confirms with a quorum that this server is still the leader;
// a read served after it is linearizable.
func (s *Store) VerifyLeader(ctx context.Context) error {
	if err := s.raft.VerifyLeader().Error(); err != nil {
		return s.raftErr(err)
	}
	return ctx.Err()
}

// WaitLeader blocks until this server knows a leader, or ctx ends.
func (s *Store) WaitLeader(ctx context.Context) error {
	t := time.NewTicker(20 * time.Millisecond)
	defer t.Stop()
	for {
		if _, id := s.raft.LeaderWithID(); id != "" {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("no raft leader: %w", ctx.Err())
		case <-t.C:
		}
	}
}

// Barrier waits until every entry committed before it is applied locally.
func (s *Store) Barrier(ctx context.Context) error {
	timeout := 10 * time.Second
	if d, ok := ctx.Deadline(); ok {
		timeout = time.Until(d)
	}
	if err := s.raft.Barrier(timeout).Error(); err != nil {
		return s.raftErr(err)
	}
	return nil
}

// Stats is a small, typed view of raft's state.
type Stats struct {
	State        string
	Term         uint64
	CommitIndex  uint64
	AppliedIndex uint64
	LastIndex    uint64
}

// Stats returns the current raft figures.
func (s *Store) Stats() Stats {
	return Stats{
		State:        s.raft.State().String(),
		Term:         s.raft.CurrentTerm(),
		CommitIndex:  s.raft.CommitIndex(),
		AppliedIndex: s.raft.AppliedIndex(),
		LastIndex:    s.raft.LastIndex(),
	}
}

// LeadershipChanges delivers true when this server becomes leader and false
// when it stops being leader. Unlike raft.LeaderCh it never drops the
// latest value: a slow reader sees the newest state.
func (s *Store) LeadershipChanges() <-chan bool {
	out := make(chan bool, 1)
	obs := make(chan raft.Observation, 16)
	s.raft.RegisterObserver(raft.NewObserver(obs, false, func(o *raft.Observation) bool {
		_, ok := o.Data.(raft.RaftState)
		return ok
	}))
	go func() {
		last := false
		push := func(v bool) {
			select {
			case <-out:
			default:
			}
			out <- v
		}
		if s.IsLeader() {
			last = true
			push(true)
		}
		for o := range obs {
			now := o.Data.(raft.RaftState) == raft.Leader
			if now != last {
				last = now
				push(now)
			}
		}
	}()
	return out
}

// Close stops raft and closes the log store. Safe to call once.
func (s *Store) Close() error {
	s.closing.Store(true)
	s.stopOnce.Do(func() { close(s.stop) })
	err := s.raft.Shutdown().Error()
	s.transport.gate.close() // no heartbeat writes the stores from here on
	if cerr := s.transport.Close(); err == nil {
		err = cerr
	}
	if cerr := s.bolt.Close(); err == nil {
		err = cerr
	}
	return err
}

// hclog bridge ---------------------------------------------------------------

// newHCLogger adapts raft's hclog output to slog: raft writes lines like
// "2026-… [WARN]  raft: message: k=v"; we forward them with their level.
func newHCLogger(l *slog.Logger) hclog.Logger { return newHCLoggerClosing(l, nil) }

// newHCLoggerClosing is newHCLogger for a store: once closing is set,
// the errors raft's own shutdown causes (its transport and streams
// closing under in-flight RPCs) are logged at debug.
func newHCLoggerClosing(l *slog.Logger, closing *atomic.Bool) hclog.Logger {
	return hclog.New(&hclog.LoggerOptions{
		Name:            "raft",
		Level:           hclog.Info,
		Output:          &slogWriter{l: l, closing: closing},
		DisableTime:     true,
		IncludeLocation: false,
	})
}

// warnClock says (at most once a minute) that this leader's clock is
// behind the cluster clock: the times it proposes are moved forward.
func (s *Store) warnClock(behindMS int64) {
	now := time.Now().UnixMilli()
	if last := s.lastClockWarn.Load(); now-last < 60_000 || !s.lastClockWarn.CompareAndSwap(last, now) {
		return
	}
	s.log.Warn("this node's clock is behind the cluster's: the times it proposes are held at the cluster's, which keeps deadlines and expiries consistent but not punctual; sync the clocks (NTP)",
		"behind", time.Duration(behindMS)*time.Millisecond)
}

// snapshotEvery is how often a Store reconsiders its snapshot threshold.
const snapshotEvery = 5 * time.Second

// snapshotThreshold is how many log entries may follow the last snapshot
// before raft takes another: at least the configured base, and twice the
// jobs the state holds, up to maxSnapshotThreshold. A snapshot costs in
// proportion to the state, so tying the interval to the state keeps the
// cost per entry flat as history grows (with a fixed 4,096, a state of
// 100,000 jobs was written out again and again under load). The cap bounds
// the log kept on disk between snapshots (etcd's default snapshot count is
// the same 100,000).
func snapshotThreshold(base uint64, jobs int) uint64 {
	return min(max(base, 2*uint64(jobs)), max(base, maxSnapshotThreshold))
}

const maxSnapshotThreshold = 100_000

// snapshotAfterBytes is how many command bytes applied since the last snapshot
// call for one, however few entries they are (a restart replays them).
const snapshotAfterBytes = 256 << 20

// adaptSnapshots keeps raft's snapshot threshold in step with the state's
// size until stop is closed.
func (s *Store) adaptSnapshots(base uint64, stop <-chan struct{}) {
	t := time.NewTicker(snapshotEvery)
	defer t.Stop()
	cur := base
	for {
		select {
		case <-stop:
			return
		case <-t.C:
		}
		if n := s.fsm.sinceSnapshot(); n > cmp.Or(s.cfg.SnapshotAfterBytes, snapshotAfterBytes) {
			// Few entries, but large ones (arrays of many tasks): the
			// entry count would not call for a snapshot for a long time,
			// and a restart replays every byte since the last one.
			s.log.Info("taking a snapshot: the log since the last one holds much", "bytes", n)
			if err := s.raft.Snapshot().Error(); err != nil && !errors.Is(err, raft.ErrNothingNewToSnapshot) {
				s.log.Warn("snapshot not taken", "err", err)
			}
		}
		want := snapshotThreshold(base, s.fsm.State().JobCount())
		// Change it only when it moves by a quarter: a reload is cheap
		// but not free.
		if want == cur || (want > cur && want-cur < cur/4) || (want < cur && cur-want < cur/4) {
			continue
		}
		rc := s.raft.ReloadableConfig()
		rc.SnapshotThreshold = want
		if err := s.raft.ReloadConfig(rc); err != nil {
			s.log.Warn("could not change the snapshot threshold", "want", want, "err", err)
			continue
		}
		s.log.Debug("snapshot threshold follows the state", "entries", want)
		cur = want
	}
}
