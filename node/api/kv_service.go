package api

import (
	"context"
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"

	"connectrpc.com/connect"

	"github.com/palyra-mesh/palyra/consensus"
	"github.com/palyra-mesh/palyra/identity/policy"
	"github.com/palyra-mesh/palyra/node/cluster"
	"github.com/palyra-mesh/palyra/proto/palyrav1"
	"github.com/palyra-mesh/palyra/proto/raftpb"
)

// kvService serves the replicated key-value store to operators: the same
// store jobs reach through --kv-prefix grants. A call is decided on the
// Grant resource of type kv named by its key (a list: its prefix), with
// the key in the context as grant_key (a list: grant_prefix), so a policy
// can open part of the store to a device:
//
//	permit (principal == Palyra::Device::"d-…", action == Palyra::Action::"kv.read", resource)
//	when { context has grant_key && context.grant_key like "notes/*" };
type kvService struct{ s *Server }

// Page sizes of ListKV: keys, and the values' bytes a page carries (the
// client reads at most 64 MiB per message; 1,000 values of 64 KiB would be
// that).
const (
	defaultKVPage  = 100
	maxKVPage      = 1000
	maxKVPageBytes = 4 << 20
)

// checkKVKey refuses a key the store would refuse, before a commit.
func checkKVKey(key string) error {
	switch {
	case key == "":
		return invalid("the key is empty", "name a key, e.g. palyra kv get notes/count")
	case len(key) > consensus.MaxKVKey:
		return invalid(fmt.Sprintf("the key is %d bytes; keys are at most %d", len(key), consensus.MaxKVKey), "use a shorter key")
	case !utf8.ValidString(key):
		return invalid("the key is not valid UTF-8", "keys are text, e.g. notes/count")
	}
	return nil
}

// checkNewKVKey is checkKVKey for a key being written: no control
// characters either (a newline or an escape sequence in a key forged rows
// of 'audit list' and 'kv list', or drove the terminal that showed them).
// Reads and deletes take any key, so one written before the rule can
// still be read and removed.
func checkNewKVKey(key string) error {
	if err := checkKVKey(key); err != nil {
		return err
	}
	if strings.ContainsFunc(key, unicode.IsControl) {
		return invalid(fmt.Sprintf("the key %q holds a control character", key), "keys are printable text, e.g. notes/count")
	}
	return nil
}

// kvResource is the Grant a call on key (or prefix) is decided on; a list
// of every key is decided on Palyra::Grant::"*".
func kvResource(key string) policy.Resource {
	if key == "" {
		key = "*"
	}
	return policy.GrantResource(policy.GrantKV, key)
}

func kvContext(key string) map[string]any { return map[string]any{"grant_key": key} }

func (ks kvService) GetKV(ctx context.Context, req *connect.Request[palyrav1.GetKVRequest]) (*connect.Response[palyrav1.GetKVResponse], error) {
	s, m := ks.s, req.Msg
	if err := checkKVKey(m.Key); err != nil {
		return nil, err
	}
	if err := s.authz.Check(ctx, policy.ActionKVRead, kvResource(m.Key), kvContext(m.Key)); err != nil {
		return nil, err
	}
	ri, err := s.staleableRead(ctx, m.Stale)
	if err != nil {
		return nil, err
	}
	v, ok := s.control.State().KV(m.Key)
	if !ok {
		return nil, apiError(connect.CodeNotFound, "not_found", fmt.Sprintf("no key %q", m.Key),
			"list the keys with 'palyra kv list PREFIX'")
	}
	return connect.NewResponse(&palyrav1.GetKVResponse{Entry: &palyrav1.KVEntry{Key: m.Key, Value: v}, Read: ri}), nil
}

// writable refuses an operator's write while some member's software would
// apply it without recording it in the audit journal.
func (ks kvService) writable() error {
	if !ks.s.control.AllSupport(cluster.FeatureKVAudit) {
		lacking := strings.Join(ks.s.control.Lacking(cluster.FeatureKVAudit), ", ")
		return apiError(connect.CodeFailedPrecondition, "failed_precondition",
			fmt.Sprintf("not every member is known to record key-value writes in the audit journal (%s: older software, or not heard from since this node started)", lacking),
			"finish upgrading those nodes, or bring back (or remove) one that is down ('palyra nodes' shows each node's version and state), then write")
	}
	return nil
}

func (ks kvService) PutKV(ctx context.Context, req *connect.Request[palyrav1.PutKVRequest]) (*connect.Response[palyrav1.PutKVResponse], error) {
	s, m := ks.s, req.Msg
	if err := checkNewKVKey(m.Key); err != nil {
		return nil, err
	}
	if len(m.Value) > consensus.MaxKVValue {
		return nil, invalid(fmt.Sprintf("the value is %d bytes; values are at most %d (64 KiB)", len(m.Value), consensus.MaxKVValue),
			"store large data as a job's input or output instead")
	}
	if err := s.authz.Check(ctx, policy.ActionKVWrite, kvResource(m.Key), kvContext(m.Key)); err != nil {
		return nil, err
	}
	if err := ks.writable(); err != nil {
		return nil, err
	}
	caller, _ := PrincipalFrom(ctx)
	if _, err := s.control.Apply(ctx, &raftpb.Command{Cmd: &raftpb.Command_KvPut{KvPut: &raftpb.KVPut{
		Key: m.Key, Value: m.Value, By: caller.String(), AtMs: s.now().UnixMilli()}}}); err != nil {
		return nil, fromErr(err)
	}
	return connect.NewResponse(&palyrav1.PutKVResponse{}), nil
}

func (ks kvService) DeleteKV(ctx context.Context, req *connect.Request[palyrav1.DeleteKVRequest]) (*connect.Response[palyrav1.DeleteKVResponse], error) {
	s, m := ks.s, req.Msg
	if err := checkKVKey(m.Key); err != nil {
		return nil, err
	}
	if err := s.authz.Check(ctx, policy.ActionKVWrite, kvResource(m.Key), kvContext(m.Key)); err != nil {
		return nil, err
	}
	if err := ks.writable(); err != nil {
		return nil, err
	}
	// Whether it existed, from a linearizable read just before: a delete of
	// a missing key is a no-op, and says so.
	if err := s.control.VerifyRead(ctx); err != nil {
		return nil, fromErr(err)
	}
	_, existed := s.control.State().KV(m.Key)
	if !existed {
		return connect.NewResponse(&palyrav1.DeleteKVResponse{}), nil
	}
	caller, _ := PrincipalFrom(ctx)
	if _, err := s.control.Apply(ctx, &raftpb.Command{Cmd: &raftpb.Command_KvDelete{KvDelete: &raftpb.KVDelete{
		Key: m.Key, By: caller.String(), AtMs: s.now().UnixMilli()}}}); err != nil {
		return nil, fromErr(err)
	}
	return connect.NewResponse(&palyrav1.DeleteKVResponse{Existed: true}), nil
}

func (ks kvService) ListKV(ctx context.Context, req *connect.Request[palyrav1.ListKVRequest]) (*connect.Response[palyrav1.ListKVResponse], error) {
	s, m := ks.s, req.Msg
	if len(m.Prefix) > consensus.MaxKVKey || !utf8.ValidString(m.Prefix) {
		return nil, invalid("the prefix is not a valid key prefix", fmt.Sprintf("a prefix is UTF-8 text of at most %d bytes", consensus.MaxKVKey))
	}
	if err := s.authz.Check(ctx, policy.ActionKVRead, kvResource(m.Prefix), map[string]any{"grant_prefix": m.Prefix}); err != nil {
		return nil, err
	}
	limit := int(m.Limit)
	switch {
	case limit == 0:
		limit = defaultKVPage
	case limit > maxKVPage:
		return nil, invalid(fmt.Sprintf("limit %d is over %d", limit, maxKVPage), "page with --after (the next cursor)")
	}
	ri, err := s.staleableRead(ctx, m.Stale)
	if err != nil {
		return nil, err
	}
	entries, more := s.control.State().KVList(m.Prefix, m.After, limit, maxKVPageBytes, m.KeysOnly)
	out := &palyrav1.ListKVResponse{Entries: make([]*palyrav1.KVEntry, len(entries)), Read: ri}
	for i, e := range entries {
		out.Entries[i] = &palyrav1.KVEntry{Key: e.Key, Value: e.Value}
	}
	if more && len(entries) > 0 {
		out.Next = entries[len(entries)-1].Key
	}
	return connect.NewResponse(out), nil
}
