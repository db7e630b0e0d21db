package cli

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/palyra-mesh/palyra/proto/palyrav1"
)

// A job in a list carries no payloads: no "output"/"stderr" keys (an
// empty one read as an empty result), but its sizes; a single job keeps
// its output key even when the output is empty.
func TestListJobJSONHasNoPayloadKeys(t *testing.T) {
	j := &palyrav1.Job{Id: "j-1", Phase: palyrav1.JobPhase_JOB_PHASE_COMPLETED, StdoutSize: 8, StderrSize: 3}
	b, err := json.Marshal(listJobJSON{jobJSON: toJobJSON(j)})
	if err != nil {
		t.Fatal(err)
	}
	s := string(b)
	if strings.Contains(s, `"output"`) || strings.Contains(s, `"stderr"`) || !strings.Contains(s, `"output_size":8`) || !strings.Contains(s, `"stderr_size":3`) {
		t.Fatalf("list entry: %s", s)
	}
	b, _ = json.Marshal(toJobJSON(j))
	if !strings.Contains(string(b), `"output":""`) {
		t.Fatalf("single job: %s", b)
	}
}

// Output that is not text comes through --json byte for byte, as base64
// (a JSON string turned its bytes into U+FFFD).
func TestBinaryOutputInJSONIsBase64(t *testing.T) {
	bin := []byte{0xff, 0xfe, 0x00, 0x80, 'a', 'b', 'c'}
	b, err := json.Marshal(toJobJSON(&palyrav1.Job{Id: "j-1", Stdout: bin, Stderr: []byte("warn\n"), StdoutSize: 7}))
	if err != nil {
		t.Fatal(err)
	}
	var got struct {
		Output       string `json:"output"`
		OutputBase64 []byte `json:"output_base64"` // encoding/json decodes base64 into []byte
		Stderr       string `json:"stderr"`
		StderrBase64 *string
	}
	if err := json.Unmarshal(b, &got); err != nil || got.Output != "" || string(got.OutputBase64) != string(bin) || got.Stderr != "warn\n" || strings.Contains(string(b), "stderr_base64") {
		t.Fatalf("binary output as JSON: %s (%v)", b, err)
	}
}

// --json times have exactly three decimals, so they line up and sort as
// text; none is empty but a zero.
func TestJSONTimesHaveMilliseconds(t *testing.T) {
	at := time.Date(2026, 11, 27, 4, 18, 7, 260_000_000, time.UTC)
	for ms, want := range map[int64]string{
		at.UnixMilli():                       "2026-11-27T04:18:07.260Z",
		at.Truncate(time.Second).UnixMilli(): "2026-11-27T04:18:07.000Z",
		0:                                    "",
	} {
		if got := msTime(ms); got != want {
			t.Errorf("msTime(%d) = %q, want %q", ms, got, want)
		}
	}
}

// Text columns show a value with a newline or an escape sequence quoted:
// a key-value key or an audit field cannot forge rows or drive the
// terminal.
func TestPrintableText(t *testing.T) {
	for in, want := range map[string]string{
		"notes/count":       "notes/count",
		"with space ünï":    "with space ünï",
		"tmp/x\n99 forged":  `"tmp/x\n99 forged"`,
		"esc\x1b[2J":        `"esc\x1b[2J"`,
		"rtl\u202eoverride": `"rtl\u202eoverride"`,
	} {
		if got := printableText(in); got != want {
			t.Errorf("printableText(%q) = %s, want %s", in, got, want)
		}
	}
}
