// Package backup is the file format of a cluster snapshot, the file that
// 'palyra snapshot save' writes and 'palyra snapshot restore' and
// 'palyra snapshot inspect' read. It knows nothing of what the state
// section means (that is consensus's snapshot stream): it frames the
// sections, streams them both ways without holding a section in memory,
// and makes damage of any kind an error, never a panic or a silent loss.
//
// A file is the magic, a format version, then frames in this order:
//
//	H  header (JSON): cluster, CA fingerprint, raft index and term, …
//	K  keys (JSON): the cluster CA certificate and key, the data key
//	S* the replicated state, in chunks (consensus's streamed snapshot)
//	s  end of state: its total length
//	(B b*)* one blob each: B names it (sha256) and gives its size, b frames carry it
//	E  summary (JSON): counts, blobs, blobs that could not be found
//	Z  sha256 of every byte before this frame
//
// A frame is a type byte, a 4-byte big-endian length and the payload.
// The reader checks the order, every length, every blob's hash, the
// trailing checksum and that nothing follows it.
package backup

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"io"
	"time"
)

// Magic starts every snapshot file.
const Magic = "PALYRA-CLUSTER-SNAPSHOT\x00"

// FormatVersion is the version this package writes; Read refuses newer.
const FormatVersion = 1

// Frame types.
const (
	frameHeader   = 'H'
	frameKeys     = 'K'
	frameState    = 'S'
	frameStateEnd = 's'
	frameBlob     = 'B'
	frameBlobData = 'b'
	frameEnd      = 'E'
	frameChecksum = 'Z'
)

// Limits. A frame's payload is at most maxFrame bytes (data is written in
// chunks of chunkSize); a blob is at most MaxBlobBytes.
const (
	chunkSize    = 1 << 20
	maxFrame     = chunkSize
	MaxBlobBytes = 1 << 30
)

// Header describes a snapshot: where and when it was taken, and the raft
// position its state reflects.
type Header struct {
	Format        int       `json:"format"`
	ClusterName   string    `json:"cluster_name"`
	CAFingerprint string    `json:"ca_fingerprint"`
	CreatedAt     time.Time `json:"created_at"`
	CreatedBy     string    `json:"created_by"` // the principal that asked for it
	ServedBy      string    `json:"served_by"`  // the node that made it
	Version       string    `json:"palyra_version"`
	RaftIndex     uint64    `json:"raft_index"`
	RaftTerm      uint64    `json:"raft_term"`
	// Servers is the raft configuration the state was taken under.
	Servers []Server `json:"servers"`
	// StateBytes is the size of the state section.
	StateBytes int64 `json:"state_bytes"`
}

// Server is one raft server of the cluster the snapshot was taken from.
type Server struct {
	ID      string `json:"id"`
	Address string `json:"address"`
	Voter   bool   `json:"voter"`
}

// Keys are the cluster's secrets that live outside the replicated state:
// with them a restored cluster is the same cluster (its devices' and
// nodes' certificates verify; its sealed secrets open).
type Keys struct {
	CACertPEM []byte `json:"ca_cert_pem"`
	CAKeyPEM  []byte `json:"ca_key_pem"`
	DataKey   []byte `json:"data_key"`
}

// Summary closes a snapshot: what its state holds and which blobs it
// carries.
type Summary struct {
	AppliedIndex  uint64            `json:"applied_index"`
	Jobs          uint64            `json:"jobs"`
	Arrays        uint64            `json:"arrays"`
	JobsByPhase   map[string]uint64 `json:"jobs_by_phase,omitempty"`
	Nodes         int               `json:"nodes"`
	Devices       int               `json:"devices"`
	Secrets       int               `json:"secrets"`
	PolicyVersion uint64            `json:"policy_version"`
	Blobs         int               `json:"blobs"`
	BlobBytes     int64             `json:"blob_bytes"`
	// MissingBlobs are blobs the state names that no node held when the
	// snapshot was taken (lost before it, or pruned and collected while
	// it ran); the jobs naming them are restored without those payloads.
	MissingBlobs []string `json:"missing_blobs,omitempty"`
}

// Writer writes a snapshot file in order: Header, Keys, State (then
// EndState), Blob for each blob, Close. Its methods must be called in
// that order; the first error sticks.
type Writer struct {
	w        io.Writer
	sum      hash.Hash
	n        int64
	stage    int
	stateLen int64
	err      error
}

const (
	stageNew = iota
	stageHeader
	stageKeys
	stageState
	stageBlobs
	stageClosed
)

// NewWriter returns a Writer onto w.
func NewWriter(w io.Writer) *Writer { return &Writer{w: w, sum: sha256.New()} }

// Bytes is how many bytes have been written so far.
func (w *Writer) Bytes() int64 { return w.n }

func (w *Writer) write(p []byte) error {
	if w.err != nil {
		return w.err
	}
	w.sum.Write(p)
	n, err := w.w.Write(p)
	w.n += int64(n)
	if err != nil {
		w.err = err
	}
	return w.err
}

func (w *Writer) frame(typ byte, payload []byte) error {
	var h [5]byte
	h[0] = typ
	binary.BigEndian.PutUint32(h[1:], uint32(len(payload)))
	if err := w.write(h[:]); err != nil {
		return err
	}
	return w.write(payload)
}

func (w *Writer) expect(stage int, what string) error {
	if w.err != nil {
		return w.err
	}
	if w.stage != stage {
		w.err = fmt.Errorf("backup: %s out of order", what)
	}
	return w.err
}

func (w *Writer) jsonFrame(typ byte, v any) error {
	data, err := json.Marshal(v)
	if err != nil {
		w.err = err
		return err
	}
	if len(data) > maxFrame {
		w.err = fmt.Errorf("backup: %c record of %d bytes is over the frame limit", typ, len(data))
		return w.err
	}
	return w.frame(typ, data)
}

// Header writes the magic, the format version and h.
func (w *Writer) Header(h Header) error {
	if err := w.expect(stageNew, "header"); err != nil {
		return err
	}
	h.Format = FormatVersion
	var v [2]byte
	binary.BigEndian.PutUint16(v[:], FormatVersion)
	if err := w.write(append([]byte(Magic), v[:]...)); err != nil {
		return err
	}
	w.stage = stageHeader
	return w.jsonFrame(frameHeader, h)
}

// Keys writes the cluster's keys.
func (w *Writer) Keys(k Keys) error {
	if err := w.expect(stageHeader, "keys"); err != nil {
		return err
	}
	w.stage = stageKeys
	return w.jsonFrame(frameKeys, k)
}

// Write appends p to the state section (after Keys, before EndState).
func (w *Writer) Write(p []byte) (int, error) {
	if w.stage == stageKeys && w.err == nil {
		w.stage = stageState
	}
	if err := w.expect(stageState, "state"); err != nil {
		return 0, err
	}
	done := 0
	for len(p) > 0 {
		c := p[:min(len(p), chunkSize)]
		if err := w.frame(frameState, c); err != nil {
			return done, err
		}
		done += len(c)
		w.stateLen += int64(len(c))
		p = p[len(c):]
	}
	return done, nil
}

// EndState ends the state section.
func (w *Writer) EndState() error {
	if w.stage == stageKeys && w.err == nil {
		w.stage = stageState // an empty state is a damaged one, but let the reader say so
	}
	if err := w.expect(stageState, "end of state"); err != nil {
		return err
	}
	w.stage = stageBlobs
	var n [8]byte
	binary.BigEndian.PutUint64(n[:], uint64(w.stateLen))
	return w.frame(frameStateEnd, n[:])
}

// Blob writes one blob; hash must be the lowercase hex sha256 of data.
func (w *Writer) Blob(hash string, data []byte) error {
	if err := w.expect(stageBlobs, "blob"); err != nil {
		return err
	}
	raw, err := hex.DecodeString(hash)
	if err != nil || len(raw) != sha256.Size {
		w.err = fmt.Errorf("backup: %q is not a blob hash", hash)
		return w.err
	}
	if sum := sha256.Sum256(data); string(sum[:]) != string(raw) {
		w.err = fmt.Errorf("backup: blob %s does not match its hash", hash)
		return w.err
	}
	if int64(len(data)) > MaxBlobBytes {
		w.err = fmt.Errorf("backup: blob %s of %d bytes is over the limit", hash, len(data))
		return w.err
	}
	start := binary.BigEndian.AppendUint64(raw, uint64(len(data)))
	if err := w.frame(frameBlob, start); err != nil {
		return err
	}
	for len(data) > 0 {
		c := data[:min(len(data), chunkSize)]
		if err := w.frame(frameBlobData, c); err != nil {
			return err
		}
		data = data[len(c):]
	}
	return nil
}

// Close writes the summary and the checksum. The file is complete only
// once Close returned nil.
func (w *Writer) Close(s Summary) error {
	if err := w.expect(stageBlobs, "summary"); err != nil {
		return err
	}
	if err := w.jsonFrame(frameEnd, s); err != nil {
		return err
	}
	w.stage = stageClosed
	sum := w.sum.Sum(nil)
	return w.frame(frameChecksum, sum)
}

// FormatError says a snapshot file is damaged, where, and what to do.
type FormatError struct {
	Offset    int64 // byte offset of the problem
	Msg       string
	Truncated bool // the file ends early
}

func (e *FormatError) Error() string {
	if e.Truncated {
		return fmt.Sprintf("snapshot file is truncated at byte %d: %s", e.Offset, e.Msg)
	}
	return fmt.Sprintf("snapshot file is damaged at byte %d: %s", e.Offset, e.Msg)
}

// Hint says what to do about the damage.
func (e *FormatError) Hint() string {
	if e.Truncated {
		return "the save did not finish or the copy is incomplete: copy the file again, or take a new one with 'palyra snapshot save'"
	}
	return "the file was changed or corrupted after it was saved: use another copy, or take a new one with 'palyra snapshot save'"
}

// ErrNewerFormat is returned for a file written by a newer palyra.
var ErrNewerFormat = errors.New("snapshot file format is newer than this palyra understands")

// Visitor receives a file's sections as Read meets them. A nil field
// skips its section (it is still read and checked). State and Blob get
// readers of that section's bytes; whatever they leave unread is read
// and checked after they return. An error from a visitor ends Read with
// that error.
type Visitor struct {
	Header func(Header) error
	Keys   func(Keys) error
	State  func(r io.Reader) error
	// Blob's reader fails at its end if the bytes do not match hash.
	Blob func(hash string, size int64, r io.Reader) error
}
