package client

import (
	"context"
	"fmt"
	"testing"

	"connectrpc.com/connect"
	"github.com/quic-go/quic-go"

	"github.com/palyra-mesh/palyra/proto/palyrav1"
)

// A read whose node closed the connection under it is made once more (a
// trial: 'palyra nodes' failed while three other nodes were up); a write
// keeps the error, since it may have taken effect.
func TestReadsRetriedWhenTheirNodeGoesAway(t *testing.T) {
	c := &Client{Addrs: []string{"a:1", "b:1"}, answered: "a:1"}
	closed := fmt.Errorf("http3: parsing frame failed: %w", &quic.ApplicationError{Remote: true, ErrorCode: 0x100, ErrorMessage: "node shutting down"})
	for _, tc := range []struct {
		procedure string
		err       error
		calls     int
	}{
		{"/palyra.v1.NodeService/ListNodes", closed, 2},
		{"/palyra.v1.NodeService/Status", closed, 2},
		{"/palyra.v1.JobService/GetJob", closed, 2},
		{"/palyra.v1.JobService/CancelJob", closed, 1},
		{"/palyra.v1.JobService/SubmitJob", closed, 1},
		{"/palyra.v1.NodeService/ListNodes", &quic.ApplicationError{Remote: false, ErrorMessage: "closed here"}, 1},
		{"/palyra.v1.NodeService/ListNodes", connect.NewError(connect.CodeNotFound, fmt.Errorf("no")), 1},
	} {
		c.avoid = ""
		calls := 0
		next := func(context.Context, connect.AnyRequest) (connect.AnyResponse, error) {
			calls++
			if calls == 1 {
				return nil, tc.err
			}
			return nil, nil
		}
		req := connect.NewRequest(&palyrav1.StatusRequest{})
		spec := connect.Spec{Procedure: tc.procedure}
		_, err := goingAway{c}.WrapUnary(next)(context.Background(), specRequest{req, spec})
		if calls != tc.calls {
			t.Errorf("%s after %v: %d calls, want %d (err %v)", tc.procedure, tc.err, calls, tc.calls, err)
		}
		if tc.calls == 2 && (err != nil || c.avoid != "a:1") {
			t.Errorf("%s retried: err %v, avoid %q; want the closing node tried last", tc.procedure, err, c.avoid)
		}
	}
}

// specRequest is a request with a given Spec.
type specRequest struct {
	*connect.Request[palyrav1.StatusRequest]
	spec connect.Spec
}

func (r specRequest) Spec() connect.Spec { return r.spec }
