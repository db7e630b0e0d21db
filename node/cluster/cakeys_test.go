package cluster

import (
	"bytes"
	"errors"
	"testing"
	"time"

	"github.com/palyra-mesh/palyra/identity"
	"github.com/palyra-mesh/palyra/mesh"
	"github.com/palyra-mesh/palyra/proto/peerpb"
)

// The CA key goes voter to voter only: a non-voter asking for it is
// refused by the voters that hold it, and so is a device; once promoted,
// the same node gets it.
func TestCAKeysOnlyForVoters(t *testing.T) {
	secret := []CAKey{{RootDER: []byte("root"), KeyDER: []byte("key")}}
	n1 := newNode(t, 3)
	n1.caKeys = func() []CAKey { return secret }
	n1.start(true)
	n2 := newNode(t, 3)
	n2.start(false)
	n2.join(n1)
	// A lone voter waits for two spares before promoting: n2 stays a
	// non-voter until a third node joins.
	eventually(t, 20*time.Second, "n2 in raft as a non-voter, on both nodes", func() error {
		for _, n := range []*tnode{n1, n2} {
			if m := viewOf(n).byID[n2.id]; !m.InRaft || m.Voter || !viewOf(n).byID[n1.id].Voter {
				return errors.New("not yet")
			}
		}
		return nil
	})
	all := func([]CAKey) bool { return true }
	if keys, err := n2.cl.FetchCAKeys(ctxFor(t, 10*time.Second), nil, all); !errors.Is(err, ErrNotVoter) || keys != nil {
		t.Fatalf("non-voter fetching the CA key: %v %v; want ErrNotVoter and nothing", keys, err)
	}

	// A paired device (same CA) reaches no peer RPC at all.
	dev := issue(t, testCA, identity.KindDevice)
	devTr, err := mesh.Listen(mesh.Config{ListenAddr: "127.0.0.1:0", Logger: logger("device"),
		ServerTLS: identity.ServerTLSConfig(dev, nil, nil), ClientTLS: identity.ClientTLSConfig(dev, nil, nil)})
	if err != nil {
		t.Fatal(err)
	}
	defer devTr.Close()
	ctx := ctxFor(t, 10*time.Second)
	conn, err := devTr.OpenStream(ctx, n1.addr, mesh.TagRPC)
	if err != nil {
		t.Fatal(err)
	}
	conn.SetDeadline(time.Now().Add(5 * time.Second))
	// The node refuses a non-node caller before reading its request and
	// then stops reading, so this write may fail ("canceled by remote")
	// when the refusal wins the race; the refusal itself must arrive
	// either way.
	_ = writeFrame(conn, &peerpb.Request{Body: &peerpb.Request_CaKeys{CaKeys: &peerpb.CAKeysRequest{}}})
	var resp peerpb.Response
	if err := readFrame(conn, &resp); err != nil {
		t.Fatalf("reading the refusal: %v", err)
	}
	conn.Close()
	if resp.GetError().GetCode() != codePermissionDenied || len(resp.GetCaKeys().GetKeys()) > 0 {
		t.Fatalf("device asking for the CA key: got %v, want permission_denied", &resp)
	}

	// Promoted, n2 gets the key.
	n3 := newNode(t, 3)
	n3.start(false)
	n3.join(n1)
	eventually(t, 30*time.Second, "three voters", func() error { return converged([]*tnode{n1, n2, n3}, 3, 0) })
	eventually(t, 20*time.Second, "n2 to fetch the key as a voter", func() error {
		keys, err := n2.cl.FetchCAKeys(ctxFor(t, 10*time.Second), []string{n1.id}, all)
		if err != nil {
			return err
		}
		if len(keys) != 1 || !bytes.Equal(keys[0].KeyDER, []byte("key")) {
			t.Fatalf("voter got %v, want the holder's key", keys)
		}
		return nil
	})
}
