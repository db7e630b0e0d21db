package cluster

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/palyra-mesh/palyra/identity"
	"github.com/palyra-mesh/palyra/proto/peerpb"
)

// CAKey is one cluster CA as voters hand it to each other: its root
// certificate and private key (PKCS#8), both DER.
type CAKey struct {
	RootDER []byte
	KeyDER  []byte
}

// ErrNotVoter is FetchCAKeys' answer when the serving nodes do not count
// this node as a voter (yet, or any more).
var ErrNotVoter = errors.New("cluster: only raft voters may hold the CA key")

// Voter reports whether this node is a voter in the latest raft
// configuration it knows.
func (c *Cluster) Voter() bool {
	conf, err := c.raftServers()
	if err != nil {
		return false
	}
	s, ok := conf[c.cfg.NodeID]
	return ok && isVoter(s.Suffrage)
}

// handleCAKeys hands this node's CA keys to caller pr, but only if pr is a
// voter in the current raft configuration. The check runs after a read
// through the leader, so this node's view of the configuration is at least
// as new as every change the leader had committed when the call arrived: a
// demoted voter is refused by every server once its demotion committed.
func (c *Cluster) handleCAKeys(ctx context.Context, pr identity.Principal) *peerpb.Response {
	if c.cfg.CAKeys == nil {
		return errResp(codeFailedPrecond, "this node holds no CA key", "ask a voter")
	}
	if err := c.VerifyRead(ctx); err != nil {
		return &peerpb.Response{Error: &peerpb.Error{Code: codeUnavailable, Message: "cannot confirm the raft configuration: " + err.Error(), Hint: "retry when the cluster has a leader"}}
	}
	conf, err := c.raftServers()
	if err != nil {
		return &peerpb.Response{Error: toPBError(err)}
	}
	if s, ok := conf[pr.ID]; !ok || !isVoter(s.Suffrage) {
		c.log.Warn("refused the CA key to a node that is not a voter", "caller", pr.String())
		return errResp(codePermissionDenied, fmt.Sprintf("%s is not a raft voter; only voters hold the cluster CA key", pr), "")
	}
	keys := c.cfg.CAKeys()
	if len(keys) == 0 {
		return errResp(codeFailedPrecond, "this node holds no CA key", "ask another voter")
	}
	out := &peerpb.CAKeysResponse{}
	for _, k := range keys {
		out.Keys = append(out.Keys, &peerpb.CAKey{RootDer: k.RootDER, KeyDer: k.KeyDER})
	}
	c.log.Info("handed the cluster CA key to a voter", "voter", pr.ID, "roots", len(keys))
	return &peerpb.Response{Body: &peerpb.Response_CaKeys{CaKeys: out}}
}

// FetchCAKeys asks the other raft servers, voters first and then those in
// prefer (nodes known to hold a key), for their CA keys, and returns the
// first answer accept takes. It fails with ErrNotVoter if a server refused
// because this node is not a voter, and otherwise with the last error.
func (c *Cluster) FetchCAKeys(ctx context.Context, prefer []string, accept func([]CAKey) bool) ([]CAKey, error) {
	conf, err := c.raftServers()
	if err != nil {
		return nil, err
	}
	ids := make([]string, 0, len(conf))
	for id := range conf {
		if id != c.cfg.NodeID {
			ids = append(ids, id)
		}
	}
	rank := func(id string) int {
		switch {
		case slices.Contains(prefer, id):
			return 0
		case isVoter(conf[id].Suffrage):
			return 1
		}
		return 2
	}
	slices.SortFunc(ids, func(a, b string) int {
		if ra, rb := rank(a), rank(b); ra != rb {
			return ra - rb
		}
		if a < b {
			return -1
		}
		return 1
	})
	req := &peerpb.Request{Body: &peerpb.Request_CaKeys{CaKeys: &peerpb.CAKeysRequest{}}}
	lastErr := errors.New("no other raft server to ask")
	for _, id := range ids {
		resp, err := c.call(ctx, conf[id].Address, id, req)
		if err != nil {
			lastErr = err
			continue
		}
		if e := resp.GetError(); e != nil {
			if e.Code == codePermissionDenied {
				return nil, fmt.Errorf("%w: %s says: %s", ErrNotVoter, id, e.Message)
			}
			lastErr = fmt.Errorf("%s: %s", id, e.Message)
			continue
		}
		var keys []CAKey
		for _, k := range resp.GetCaKeys().GetKeys() {
			keys = append(keys, CAKey{RootDER: k.RootDer, KeyDER: k.KeyDer})
		}
		if accept(keys) {
			return keys, nil
		}
		lastErr = fmt.Errorf("%s holds none of the keys wanted", id)
	}
	return nil, fmt.Errorf("cluster: fetch the CA key: %w", lastErr)
}
