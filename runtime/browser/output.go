package browser

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"sort"
	"sync"

	"github.com/palyra-mesh/palyra/runtime"
)

// maxBlockedLines bounds the blocked-request report in Stderr.
const maxBlockedLines = 256

// maxDialogLines bounds the dialog report in Stderr, and each list of a
// session's dialog notes.
const maxDialogLines = 64

// maxStatusLines bounds the HTTP-status report in Stderr.
const maxStatusLines = 64

// limitError is a step failure caused by an output or artifact bound; it
// maps to runtime.ReasonOutputLimit.
type limitError struct{ msg, hint string }

// Error is the message and the hint on one line (a browser session's
// step shows it whole); a job's result keeps them apart.
func (e *limitError) Error() string { return e.msg + "; " + e.hint }

// blockedLine is one line of Result.Stderr: a request the job's policy
// refused.
type blockedLine struct {
	URL    string `json:"blocked"`
	Type   string `json:"type"`   // resource type: Document, Image, Fetch, XHR, Script, connect, ...
	Reason string `json:"reason"` // why the policy refused it
	By     string `json:"by"`     // "policy" (navigate pre-check), "fetch" (interception) or "proxy" (egress proxy)
}

// statusLine is one line of Result.Stderr: a navigate step whose page
// (the main document, after redirects) answered an HTTP error status,
// 4xx or 5xx. The page loads all the same (a 404 page is a page); the CLI
// reads the line for its note and for 'job browse --fail'.
type statusLine struct {
	Status     int64  `json:"status"`
	StatusText string `json:"status_text"`
	URL        string `json:"url"`
	Step       int    `json:"step"`
}

// dialogLine is one line of Result.Stderr: a JavaScript dialog the page
// opened, and how the executor answered it (pool.go, answerDialog).
type dialogLine struct {
	Type    string `json:"dialog"`          // alert, confirm, prompt or beforeunload
	Message string `json:"message"`         // the page's text (for beforeunload, Chromium's)
	URL     string `json:"url"`             // the frame that opened it
	Handled string `json:"handled"`         // "accepted" or "dismissed"
	Count   int    `json:"count,omitempty"` // this many in a row, when more than one
}

// note is the dialog as a session reports it: one line, the page's text
// quoted.
func (l dialogLine) note() string {
	s := fmt.Sprintf("dialog: %s %s from %s: %s", l.Type, jsString(l.Message), l.URL, l.Handled)
	if l.Count > 1 {
		s += fmt.Sprintf(" (%d times)", l.Count)
	}
	return s
}

// dialogLog is a bounded list of dialogs; the same dialog again in a row
// (a page that alerts in a loop) counts on one line.
type dialogLog struct {
	lines []dialogLine
	more  int
}

func (d *dialogLog) add(l dialogLine) {
	if n := len(d.lines); n > 0 {
		if last := &d.lines[n-1]; last.Type == l.Type && last.Message == l.Message && last.URL == l.URL && last.Handled == l.Handled {
			last.Count = max(last.Count, 1) + 1
			return
		}
	}
	if len(d.lines) >= maxDialogLines {
		d.more++
		return
	}
	d.lines = append(d.lines, l)
}

// notes returns the dialogs as a session's notes and forgets them.
func (d *dialogLog) notes() []string {
	var out []string
	for _, l := range d.lines {
		out = append(out, l.note())
	}
	if d.more > 0 {
		out = append(out, fmt.Sprintf("dialog: %d more not shown", d.more))
	}
	*d = dialogLog{}
	return out
}

// recorder collects what a job produces: named values (Stdout), blocked
// requests, answered dialogs and HTTP error statuses (Stderr) and artifacts, each under its
// limit. It is shared by
// the step loop, the Fetch handler and the egress proxy.
type recorder struct {
	maxOutput     int
	maxArtifact   int
	maxArtifacts  int
	onNavBlocked  func(*BlockedError)
	mu            sync.Mutex
	values        map[string]json.RawMessage
	valueBytes    int // size of the Stdout object so far
	blockedLines  []blockedLine
	blockedSeen   map[string]bool
	blockedMore   int
	navBlocked    *BlockedError
	statusLines   []statusLine
	statusMore    int
	dialogs       dialogLog // for Stderr
	callNotes     dialogLog // dialogs since the session's last call returned
	navFailed     error     // why the proxy could not fetch the last request that failed
	artifacts     []runtime.Artifact
	artifactBytes int
}

func newRecorder(maxOutput, maxArtifact, maxArtifacts int) *recorder {
	return &recorder{
		maxOutput: maxOutput, maxArtifact: maxArtifact, maxArtifacts: maxArtifacts,
		values: map[string]json.RawMessage{}, valueBytes: 2, blockedSeen: map[string]bool{},
	}
}

// setValue stores a named value (already JSON) for Stdout.
func (r *recorder) setValue(name string, v json.RawMessage) error {
	var buf bytes.Buffer
	if err := json.Compact(&buf, v); err != nil {
		return fmt.Errorf("value for %q is not JSON: %w", name, err)
	}
	key, _ := json.Marshal(name)
	r.mu.Lock()
	defer r.mu.Unlock()
	add := len(key) + 1 + buf.Len()
	if len(r.values) > 0 {
		add++ // comma
	}
	if r.valueBytes+add > r.maxOutput {
		return &limitError{fmt.Sprintf("value %q (%d bytes) would make the output %d bytes, over the job's limit of %d",
			name, buf.Len(), r.valueBytes+add, r.maxOutput), "extract less, or raise the limit with --max-output"}
	}
	r.values[name] = json.RawMessage(buf.Bytes())
	r.valueBytes += add
	return nil
}

// stdout is the JSON object of values by name.
func (r *recorder) stdout() []byte {
	r.mu.Lock()
	defer r.mu.Unlock()
	out, err := json.Marshal(r.values)
	if err != nil { // cannot happen: every value was compacted JSON
		return []byte("{}")
	}
	return out
}

// blocked records a refused request; a URL is listed once.
func (r *recorder) blocked(url, kind, reason, by string) {
	url = truncate(url, 2048)
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.blockedSeen[url] {
		return
	}
	if len(r.blockedLines) >= maxBlockedLines {
		r.blockedMore++
		return
	}
	r.blockedSeen[url] = true
	r.blockedLines = append(r.blockedLines, blockedLine{URL: url, Type: kind, Reason: reason, By: by})
}

// httpError records that navigate step i loaded a page that answered an
// HTTP error status (4xx, 5xx).
func (r *recorder) httpError(i int, status int64, text, url string) {
	if text == "" {
		text = http.StatusText(int(status))
	}
	l := statusLine{Status: status, StatusText: truncate(text, 256), URL: truncate(url, 2048), Step: i}
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.statusLines) >= maxStatusLines {
		r.statusMore++
		return
	}
	r.statusLines = append(r.statusLines, l)
}

// dialog records a JavaScript dialog and how it was answered.
func (r *recorder) dialog(kind, message, url string, accepted bool) {
	l := dialogLine{Type: kind, Message: truncate(message, 1024), URL: truncate(url, 2048), Handled: "dismissed"}
	if accepted {
		l.Handled = "accepted"
	}
	short := l
	short.Message, short.URL = truncate(message, 256), truncate(url, 256)
	r.mu.Lock()
	defer r.mu.Unlock()
	r.dialogs.add(l)
	r.callNotes.add(short)
}

// takeCallNotes returns the dialog notes recorded since the last call and
// forgets them.
func (r *recorder) takeCallNotes() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.callNotes.notes()
}

// navBlockedNote is a session's note for a blocked main-frame navigation
// that no step is failed for (when says when it came).
func navBlockedNote(be *BlockedError, when string) string {
	return fmt.Sprintf("navigation blocked %s: the page tried to load %s: %s", when, truncate(be.URL, 256), truncate(be.Reason, 512))
}

// blockNavigation records that the page's main frame tried to load a
// refused URL, and tells the step loop.
func (r *recorder) blockNavigation(be *BlockedError) {
	r.noteNavBlocked(be)
	r.tellNavBlocked(be)
}

// noteNavBlocked records a refused main-frame load without telling the
// step loop yet: the interception layer fails the request in between, so
// the step that sees the load fail finds why (takeNavBlocked), and the
// request is refused before the step's end lets the tab go.
func (r *recorder) noteNavBlocked(be *BlockedError) {
	r.mu.Lock()
	if r.navBlocked == nil {
		r.navBlocked = be
	}
	r.mu.Unlock()
}

// tellNavBlocked tells the step loop of a refused main-frame load
// (aborting the step).
func (r *recorder) tellNavBlocked(be *BlockedError) {
	r.mu.Lock()
	cb := r.onNavBlocked
	r.mu.Unlock()
	if cb != nil {
		cb(be)
	}
}

// fetchFailed records why the egress proxy could not fetch url (its
// connection was refused, its name does not resolve, …), for the message
// of a navigation that fails because of it.
func (r *recorder) fetchFailed(url string, err error) {
	err = fmt.Errorf("%s: %w", truncate(url, 256), err)
	r.mu.Lock()
	r.navFailed = err
	r.mu.Unlock()
}

// takeNavFailed returns and clears what fetchFailed recorded last.
func (r *recorder) takeNavFailed() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	err := r.navFailed
	r.navFailed = nil
	return err
}

// takeNavBlocked returns and clears the blocked main-frame navigation.
func (r *recorder) takeNavBlocked() *BlockedError {
	r.mu.Lock()
	defer r.mu.Unlock()
	be := r.navBlocked
	r.navBlocked = nil
	return be
}

// stderr renders the blocked-request report, then the dialog report, then
// the HTTP error statuses of navigate steps, one JSON object per line,
// bounded by maxOutput.
func (r *recorder) stderr() []byte {
	r.mu.Lock()
	defer r.mu.Unlock()
	var buf bytes.Buffer
	more := r.blockedMore
	for i, l := range r.blockedLines {
		b, _ := json.Marshal(l)
		if buf.Len()+len(b)+1 > r.maxOutput-128 {
			more += len(r.blockedLines) - i
			break
		}
		buf.Write(b)
		buf.WriteByte('\n')
	}
	if more > 0 {
		fmt.Fprintf(&buf, "{\"blocked_more\":%d}\n", more)
	}
	more = r.dialogs.more
	for i, l := range r.dialogs.lines {
		b, _ := json.Marshal(l)
		if buf.Len()+len(b)+1 > r.maxOutput-64 {
			more += len(r.dialogs.lines) - i
			break
		}
		buf.Write(b)
		buf.WriteByte('\n')
	}
	if more > 0 {
		fmt.Fprintf(&buf, "{\"dialogs_more\":%d}\n", more)
	}
	more = r.statusMore
	for i, l := range r.statusLines {
		b, _ := json.Marshal(l)
		if buf.Len()+len(b)+1 > r.maxOutput-64 {
			more += len(r.statusLines) - i
			break
		}
		buf.Write(b)
		buf.WriteByte('\n')
	}
	if more > 0 {
		fmt.Fprintf(&buf, "{\"statuses_more\":%d}\n", more)
	}
	return buf.Bytes()
}

// blockedURLs lists the refused URLs, for tests and logs.
func (r *recorder) blockedURLs() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]string, 0, len(r.blockedLines))
	for _, l := range r.blockedLines {
		out = append(out, l.URL)
	}
	sort.Strings(out)
	return out
}

// addArtifact stores an artifact if it fits both bounds.
func (r *recorder) addArtifact(name, mediaType string, data []byte) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(data) > r.maxArtifact {
		return &limitError{fmt.Sprintf("artifact %q is %d bytes, over the per-artifact limit of %d", name, len(data), r.maxArtifact), "capture a smaller element or page"}
	}
	if r.artifactBytes+len(data) > r.maxArtifacts {
		return &limitError{fmt.Sprintf("artifact %q (%d bytes) would bring the job's artifacts to %d bytes, over the total limit of %d",
			name, len(data), r.artifactBytes+len(data), r.maxArtifacts), "capture fewer or smaller ones"}
	}
	r.artifacts = append(r.artifacts, runtime.Artifact{Name: name, MediaType: mediaType, Data: data})
	r.artifactBytes += len(data)
	return nil
}

func (r *recorder) takeArtifacts() []runtime.Artifact {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.artifacts
}

// takeValues returns the values set since the last call and forgets them
// (a session reports each call's values on their own).
func (r *recorder) takeValues() []byte {
	r.mu.Lock()
	defer r.mu.Unlock()
	out, err := json.Marshal(r.values)
	if err != nil {
		out = []byte("{}")
	}
	r.values = map[string]json.RawMessage{}
	r.valueBytes = 2
	return out
}

// takeArtifactsReset returns the artifacts stored since the last call and
// forgets them, freeing their share of the total.
func (r *recorder) takeArtifactsReset() []runtime.Artifact {
	r.mu.Lock()
	defer r.mu.Unlock()
	a := r.artifacts
	r.artifacts, r.artifactBytes = nil, 0
	return a
}
