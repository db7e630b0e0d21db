package abi

import (
	"bytes"
	"encoding/binary"
	"errors"
	"reflect"
	"strings"
	"testing"
)

func TestRoundTrip(t *testing.T) {
	req := Request{Method: "POST", URL: "https://example.com/x?y=1",
		Header: []Header{{"A", "1"}, {"A", "2"}, {"Content-Type", "text/plain"}}, Body: []byte("body")}
	got, err := DecodeRequest(AppendRequest(nil, req))
	if err != nil || !reflect.DeepEqual(got, req) {
		t.Fatalf("request round trip: %+v, %v", got, err)
	}
	resp := Response{Status: 404, Header: []Header{{"X", ""}}, Body: []byte{}}
	enc := AppendResponse(nil, resp)
	if len(enc) != EncodedHeaderSize(resp.Header)+4+len(resp.Body) {
		t.Errorf("EncodedHeaderSize disagrees with AppendResponse: %d vs %d", EncodedHeaderSize(resp.Header)+4, len(enc))
	}
	gotResp, err := DecodeResponse(enc)
	if err != nil || !reflect.DeepEqual(gotResp, resp) {
		t.Fatalf("response round trip: %+v, %v", gotResp, err)
	}
}

func TestDecodeRefuses(t *testing.T) {
	valid := AppendRequest(nil, Request{URL: "http://a/"})
	u32 := func(v uint32) []byte { return binary.LittleEndian.AppendUint32(nil, v) }
	manyHeaders := append(append(append(u32(0), u32(0)...), u32(MaxHeaders+1)...), u32(0)...)
	for name, tc := range map[string]struct {
		b    []byte
		want string
	}{
		"empty":            {nil, "method length: truncated"},
		"truncated":        {valid[:len(valid)-1], "body length: truncated"},
		"trailing":         {append(bytes.Clone(valid), 0), "1 trailing bytes"},
		"huge method":      {u32(1 << 31), "method is 2147483648 bytes, more than the limit of 16"},
		"length past end":  {append(u32(0), u32(100)...), "url: truncated"},
		"too many headers": {manyHeaders, "101 headers, more than the limit of 100"},
	} {
		_, err := DecodeRequest(tc.b)
		if !errors.Is(err, ErrMalformed) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want ErrMalformed containing %q", name, err, tc.want)
		}
	}
	if _, err := DecodeResponse(AppendResponse(nil, Response{Status: 42})); !errors.Is(err, ErrMalformed) {
		t.Errorf("status 42: %v", err)
	}
	big := []Header{{Name: "A", Value: strings.Repeat("x", MaxHeaderBytes)}}
	if _, err := DecodeResponse(AppendResponse(nil, Response{Status: 200, Header: big})); err == nil || !strings.Contains(err.Error(), "headers exceed") {
		t.Errorf("oversized headers: %v", err)
	}
}

func TestCodeNames(t *testing.T) {
	seen := map[string]bool{}
	for c := Code(-1); c >= CodeUnavailable; c-- {
		s := c.String()
		if s == "unknown error" || seen[s] {
			t.Errorf("code %d has name %q", c, s)
		}
		seen[s] = true
	}
}

// FuzzDecodeRequest: no panic, and whatever decodes re-encodes to the
// same bytes (the layout has one encoding per message).
func FuzzDecodeRequest(f *testing.F) {
	f.Add(AppendRequest(nil, Request{Method: "GET", URL: "http://x/", Header: []Header{{"a", "b"}}, Body: []byte("c")}))
	f.Add([]byte{})
	f.Add([]byte{0xff, 0xff, 0xff, 0xff})
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := DecodeRequest(b)
		if err != nil {
			return
		}
		if again := AppendRequest(nil, r); !bytes.Equal(again, b) {
			t.Fatalf("re-encoding differs:\n%x\n%x", b, again)
		}
	})
}

func FuzzDecodeResponse(f *testing.F) {
	f.Add(AppendResponse(nil, Response{Status: 200, Header: []Header{{"a", "b"}}, Body: []byte("c")}))
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := DecodeResponse(b)
		if err != nil {
			return
		}
		if again := AppendResponse(nil, r); !bytes.Equal(again, b) {
			t.Fatalf("re-encoding differs:\n%x\n%x", b, again)
		}
	})
}

// TestDocumentedExample pins the example in ABI.md.
func TestDocumentedExample(t *testing.T) {
	want := append(append([]byte{0, 0, 0, 0, 9, 0, 0, 0}, "http://a/"...), 0, 0, 0, 0, 0, 0, 0, 0)
	if got := AppendRequest(nil, Request{URL: "http://a/"}); !bytes.Equal(got, want) {
		t.Errorf("encoding = %x, want %x", got, want)
	}
}
