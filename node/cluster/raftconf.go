package cluster

import (
	"fmt"
	"slices"
	"strings"

	"github.com/hashicorp/raft"
)

type raftSuffrage = raft.ServerSuffrage

// raftServer is one entry of the raft configuration.
type raftServer struct {
	Address  string
	Suffrage raft.ServerSuffrage
}

func raftID(id string) raft.ServerID       { return raft.ServerID(id) }
func raftAddr(a string) raft.ServerAddress { return raft.ServerAddress(a) }
func isVoter(s raft.ServerSuffrage) bool   { return s == raft.Voter }
func suffrageName(s raft.ServerSuffrage) string {
	if s == raft.Voter {
		return "voter"
	}
	return "non-voter"
}

// raftServers returns the latest raft configuration this node knows (on a
// follower it may trail the leader's by a few entries).
func (c *Cluster) raftServers() (map[string]raftServer, error) {
	f := c.raft.GetConfiguration()
	if err := f.Error(); err != nil {
		return nil, fmt.Errorf("read raft configuration: %w", err)
	}
	out := make(map[string]raftServer)
	for _, s := range f.Configuration().Servers {
		out[string(s.ID)] = raftServer{Address: string(s.Address), Suffrage: s.Suffrage}
	}
	return out, nil
}

// describe prints a configuration compactly for logs: "n-1(voter) n-2(non-voter)".
func describe(conf map[string]raftServer) string {
	ids := make([]string, 0, len(conf))
	for id := range conf {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	parts := make([]string, len(ids))
	for i, id := range ids {
		parts[i] = id + "(" + suffrageName(conf[id].Suffrage) + ")"
	}
	return strings.Join(parts, " ")
}
