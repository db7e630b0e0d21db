package client_test

import (
	"context"
	"crypto/x509"
	"errors"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/quic-go/quic-go/http3"

	"github.com/palyra-mesh/palyra/cli/client"
	"github.com/palyra-mesh/palyra/identity"
	"github.com/palyra-mesh/palyra/proto/palyrav1"
	"github.com/palyra-mesh/palyra/proto/palyrav1/palyrav1connect"
)

// fakeCA issues the certificates of fake nodes and of the device that
// calls them.
type fakeCA struct{ ca *identity.CA }

func newFakeCA(t *testing.T) fakeCA {
	t.Helper()
	ca, err := identity.InitCA(filepath.Join(t.TempDir(), "ca"), "test")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ca.Close() })
	return fakeCA{ca}
}

func (f fakeCA) issue(t *testing.T, kind identity.Kind) *identity.Credential {
	t.Helper()
	p := identity.Principal{Kind: kind, ID: identity.NewID(kind)}
	key, csr, err := identity.NewKeyAndCSR(p)
	if err != nil {
		t.Fatal(err)
	}
	chain, err := f.ca.Sign(context.Background(), csr, p, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(f.ca.Root())
	return &identity.Credential{Principal: p, Leaf: chain[0], Chain: chain[1:], Key: key, Roots: pool, RootCerts: []*x509.Certificate{f.ca.Root()}}
}

// fakeNode is an HTTP/3 API server that counts the calls it gets.
type fakeNode struct {
	addr  string
	calls atomic.Int32
}

// serve starts a fake node whose API is mux (an older node's lacks the
// services added since).
func (f fakeCA) serve(t *testing.T, mux *http.ServeMux) *fakeNode {
	t.Helper()
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	n := &fakeNode{addr: pc.LocalAddr().String()}
	srv := &http3.Server{
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			n.calls.Add(1)
			mux.ServeHTTP(w, r)
		}),
		TLSConfig: identity.ServerTLSConfig(f.issue(t, identity.KindNode), []string{http3.NextProtoH3}, nil),
	}
	go srv.Serve(pc)
	t.Cleanup(func() { srv.Close(); pc.Close() })
	return n
}

// hooks answers ListHooks with one hook named after the node, or with err.
type hooks struct {
	palyrav1connect.UnimplementedHookServiceHandler
	name string
	err  error
}

func (h hooks) ListHooks(context.Context, *connect.Request[palyrav1.ListHooksRequest]) (*connect.Response[palyrav1.ListHooksResponse], error) {
	if h.err != nil {
		return nil, h.err
	}
	return connect.NewResponse(&palyrav1.ListHooksResponse{Hooks: []*palyrav1.HookInfo{{Id: h.name}}}), nil
}

// olderNode has no HookService (software from before it); newerNode has
// one that answers as h.
func olderNode(t *testing.T, ca fakeCA) *fakeNode {
	return ca.serve(t, http.NewServeMux())
}

func newerNode(t *testing.T, ca fakeCA, h hooks) *fakeNode {
	mux := http.NewServeMux()
	mux.Handle(palyrav1connect.NewHookServiceHandler(h))
	return ca.serve(t, mux)
}

// newClient reaches addrs in order: the first that answers serves every
// call (a long stagger: no race between them).
func newClient(t *testing.T, ca fakeCA, addrs ...string) *client.Client {
	t.Helper()
	cl, err := client.NewCluster(addrs, ca.issue(t, identity.KindDevice), client.Options{Stagger: time.Minute, DialTimeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cl.Close() })
	return cl
}

func listHooks(t *testing.T, cl *client.Client) (*connect.Response[palyrav1.ListHooksResponse], error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	return cl.Hooks.ListHooks(ctx, connect.NewRequest(&palyrav1.ListHooksRequest{}))
}

// A call the node the client reached does not have (older software, in a
// rolling upgrade) is made again through the other nodes, past one that
// does not answer, and served by the first that has it.
func TestCallAnOlderNodeLacksGoesToAnotherNode(t *testing.T) {
	ca := newFakeCA(t)
	old, newer := olderNode(t, ca), newerNode(t, ca, hooks{name: "served-by-newer"})
	_, dead := deadAddrs(t)
	cl := newClient(t, ca, old.addr, dead, newer.addr)
	resp, err := listHooks(t, cl)
	if err != nil {
		t.Fatalf("ListHooks through an older node, then %s and a newer one: %v", dead, cl.Explain(err))
	}
	if len(resp.Msg.Hooks) != 1 || resp.Msg.Hooks[0].Id != "served-by-newer" {
		t.Fatalf("answered %v, want the newer node's answer", resp.Msg)
	}
	if old.calls.Load() != 1 || newer.calls.Load() != 1 {
		t.Fatalf("the older node got %d calls, the newer %d; want one each", old.calls.Load(), newer.calls.Load())
	}
	if cl.Answered() != old.addr {
		t.Fatalf("the client's connection moved to %s; want it left on %s", cl.Answered(), old.addr)
	}
}

// When every node lacks the call, the error says they run older software
// and names each.
func TestCallEveryNodeLacksIsExplainedAsOlderSoftware(t *testing.T) {
	ca := newFakeCA(t)
	a, b := olderNode(t, ca), olderNode(t, ca)
	cl := newClient(t, ca, a.addr, b.addr)
	_, err := listHooks(t, cl)
	if connect.CodeOf(err) != connect.CodeUnimplemented {
		t.Fatalf("ListHooks on older nodes only: %v, want unimplemented", err)
	}
	e := cl.Explain(err)
	if e.Code != "unimplemented" || !strings.Contains(e.Message, "older software") || !strings.Contains(e.Message, a.addr) || !strings.Contains(e.Message, b.addr) || !strings.Contains(e.Hint, "upgrade") {
		t.Fatalf("explained as %+v", e)
	}
	if a.calls.Load() != 1 || b.calls.Load() != 1 {
		t.Fatalf("the nodes got %d and %d calls; want one each", a.calls.Load(), b.calls.Load())
	}
}

// Any other answer is the call's, even "unimplemented" from a node that
// has the call but says why it cannot serve it: another node is not asked
// (the call may have taken effect, or is the answering node's own).
func TestOnlyALackingCallGoesToAnotherNode(t *testing.T) {
	ca := newFakeCA(t)
	cannot := connect.NewError(connect.CodeUnimplemented, errors.New("this node keeps no hooks"))
	if d, err := connect.NewErrorDetail(&palyrav1.Error{Code: "unimplemented", Message: "this node keeps no hooks"}); err == nil {
		cannot.AddDetail(d)
	}
	for name, refusal := range map[string]error{
		"failed_precondition":    connect.NewError(connect.CodeFailedPrecondition, errors.New("not now")),
		"the node's own refusal": cannot,
	} {
		first := newerNode(t, ca, hooks{err: refusal})
		other := newerNode(t, ca, hooks{name: "other"})
		cl := newClient(t, ca, first.addr, other.addr)
		_, err := listHooks(t, cl)
		if connect.CodeOf(err) != connect.CodeOf(refusal) {
			t.Fatalf("%s: ListHooks answered %v, want the first node's %v", name, err, refusal)
		}
		if other.calls.Load() != 0 {
			t.Fatalf("%s: the call went to another node too", name)
		}
	}
}
