package node

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/palyra-mesh/palyra/identity"
	"github.com/palyra-mesh/palyra/mesh"
	"github.com/palyra-mesh/palyra/node/blob"
	"github.com/palyra-mesh/palyra/node/cluster"
)

// Blob exchange between nodes on mesh.TagBlob streams. One request per
// stream: op ('G' get, 'P' put), the 64-char hex hash, and for a put the
// length and bytes. The answer is a status byte, and for a get the length
// and bytes. Every side verifies the hash of what it receives, so a peer
// can never plant bytes under a name they do not hash to.
const (
	blobOpGet     = 'G'
	blobOpHas     = 'H'
	blobOpPut     = 'P'
	blobOK        = 0
	blobNotFound  = 1
	blobError     = 2
	maxBlobBytes  = 64 << 20
	blobIOTimeout = 30 * time.Second
)

// blobNet serves and fetches blobs and replicates new ones.
type blobNet struct {
	local     *blob.Store
	transport *mesh.Transport
	self      string
	members   func() []cluster.Member
	// alive reports whether a member is alive (as members would list
	// it), without listing them: Locate asks it once per submit.
	alive func(id string) bool
	log   interface{ Warn(string, ...any) }
	// allow is the policy's blob.fetch for a peer node (nil: allowed).
	allow func(identity.Principal) error

	// held remembers, per blob this node stored and replicated, the other
	// nodes that acknowledged holding it, so a blob already held here and
	// on a live peer is not read, hashed or pushed again. Set by newBlobNet.
	held   *blob.LRU[[]string]
	heldMu sync.Mutex // one read-and-add of held at a time (addHolder)
	// background bounds the Puts whose second push goes on after they
	// returned (each holds its blob, up to 64 MiB, until it ends).
	background chan struct{}
	pushes     atomic.Int64 // blobs offered to peers (for tests)
	// inflight counts pushes under way (for tests: a Put returns before
	// a slow peer's push ends).
	inflight atomic.Int64
	dropped  atomic.Int64 // second copies dropped for want of background room (for tests)
}

// heldBlobs bounds the memory of where blobs are held.
const heldBlobs = 4096

// backgroundPuts is how many Puts may leave their second push running
// after they return; past it a Put drops its second copy.
const backgroundPuts = 4

func newBlobNet(local *blob.Store, tr *mesh.Transport, self string, members func() []cluster.Member,
	log interface{ Warn(string, ...any) }) *blobNet {
	b := &blobNet{local: local, transport: tr, self: self, members: members, log: log,
		held: blob.NewLRU[[]string](heldBlobs), background: make(chan struct{}, backgroundPuts)}
	b.alive = func(id string) bool {
		for _, m := range members() {
			if m.ID == id {
				return m.State == cluster.StateAlive
			}
		}
		return false
	}
	return b
}

// serve answers one blob stream from a peer node.
func (b *blobNet) serve(conn net.Conn, peer mesh.PeerInfo) {
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(blobIOTimeout))
	p, err := identity.PeerPrincipal(peer.TLS)
	if err != nil || p.Kind != identity.KindNode {
		return // only nodes exchange blobs
	}
	if b.allow != nil {
		if err := b.allow(p); err != nil {
			b.log.Warn("refused a blob exchange by the policy", "peer", p.String(), "err", err)
			conn.Write([]byte{blobError})
			return
		}
	}
	r := bufio.NewReader(conn)
	op, err := r.ReadByte()
	if err != nil {
		return
	}
	hash := make([]byte, 64)
	if _, err := io.ReadFull(r, hash); err != nil || !blob.ValidHash(string(hash)) {
		conn.Write([]byte{blobError})
		return
	}
	switch op {
	case blobOpHas:
		if b.local.Has(string(hash)) {
			conn.Write([]byte{blobOK})
		} else {
			conn.Write([]byte{blobNotFound})
		}
	case blobOpGet:
		data, err := b.local.Get(string(hash))
		if err != nil {
			conn.Write([]byte{blobNotFound})
			return
		}
		var hdr [9]byte
		hdr[0] = blobOK
		binary.BigEndian.PutUint64(hdr[1:], uint64(len(data)))
		conn.Write(hdr[:])
		conn.Write(data)
	case blobOpPut:
		data, err := readSized(r)
		if err != nil || blob.Hash(data) != string(hash) {
			conn.Write([]byte{blobError})
			return
		}
		if _, err := b.local.Put(data); err != nil {
			conn.Write([]byte{blobError})
			return
		}
		conn.Write([]byte{blobOK})
	}
}

func readSized(r io.Reader) ([]byte, error) {
	var n [8]byte
	if _, err := io.ReadFull(r, n[:]); err != nil {
		return nil, err
	}
	size := binary.BigEndian.Uint64(n[:])
	if size > maxBlobBytes {
		return nil, fmt.Errorf("blob of %d bytes is over the limit", size)
	}
	data := make([]byte, size)
	_, err := io.ReadFull(r, data)
	return data, err
}

func (b *blobNet) others() []cluster.Member {
	var out []cluster.Member
	for _, m := range b.members() {
		if m.ID != b.self && m.State == cluster.StateAlive {
			out = append(out, m)
		}
	}
	return out
}

// fetch gets hash from addr and verifies it.
func (b *blobNet) fetch(ctx context.Context, addr, hash string) ([]byte, error) {
	conn, err := b.transport.OpenStream(ctx, addr, mesh.TagBlob)
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(blobIOTimeout))
	if _, err := conn.Write(append([]byte{blobOpGet}, hash...)); err != nil {
		return nil, err
	}
	r := bufio.NewReader(conn)
	st, err := r.ReadByte()
	if err != nil {
		return nil, err
	}
	if st != blobOK {
		return nil, fmt.Errorf("%w at %s", blob.ErrNotFound, addr)
	}
	data, err := readSized(r)
	if err != nil {
		return nil, err
	}
	if blob.Hash(data) != hash {
		return nil, fmt.Errorf("blob from %s does not match its hash %s", addr, hash)
	}
	return data, nil
}

// has asks addr whether it holds hash.
func (b *blobNet) has(ctx context.Context, addr, hash string) bool {
	conn, err := b.transport.OpenStream(ctx, addr, mesh.TagBlob)
	if err != nil {
		return false
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(blobIOTimeout))
	if _, err := conn.Write(append([]byte{blobOpHas}, hash...)); err != nil {
		return false
	}
	var st [1]byte
	_, err = io.ReadFull(conn, st[:])
	return err == nil && st[0] == blobOK
}

// push sends data to addr (unless it holds it already) and waits for the
// stored acknowledgement.
func (b *blobNet) push(ctx context.Context, addr, hash string, data []byte) error {
	b.pushes.Add(1)
	b.inflight.Add(1)
	defer b.inflight.Add(-1)
	if b.has(ctx, addr, hash) {
		return nil
	}
	conn, err := b.transport.OpenStream(ctx, addr, mesh.TagBlob)
	if err != nil {
		return err
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(blobIOTimeout))
	hdr := make([]byte, 0, 1+64+8)
	hdr = append(hdr, blobOpPut)
	hdr = append(hdr, hash...)
	hdr = binary.BigEndian.AppendUint64(hdr, uint64(len(data)))
	if _, err := conn.Write(hdr); err != nil {
		return err
	}
	if _, err := conn.Write(data); err != nil {
		return err
	}
	var st [1]byte
	if _, err := io.ReadFull(conn, st[:]); err != nil {
		return err
	}
	if st[0] != blobOK {
		return fmt.Errorf("%s refused the blob", addr)
	}
	return nil
}

// Get returns a blob from local disk or, failing that, from a peer.
func (b *blobNet) Get(hash string) ([]byte, error) {
	return b.GetContext(context.Background(), hash)
}

// GetContext is Get, giving up when ctx ends (and after a minute at most).
func (b *blobNet) GetContext(ctx context.Context, hash string) ([]byte, error) {
	data, err := b.local.Get(hash)
	if err == nil || !errors.Is(err, blob.ErrNotFound) {
		return data, err
	}
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	var errs []error
	for _, m := range b.others() {
		if ctx.Err() != nil {
			errs = append(errs, ctx.Err())
			break
		}
		data, ferr := b.fetch(ctx, m.Address, hash)
		if ferr == nil {
			if _, perr := b.local.Put(data); perr != nil {
				b.log.Warn("could not cache fetched blob", "hash", hash, "err", perr)
			}
			return data, nil
		}
		errs = append(errs, ferr)
	}
	return nil, fmt.Errorf("%w: %s on no reachable node (%v)", blob.ErrNotFound, hash, errors.Join(errs...))
}

// Put stores data locally and on up to two other live nodes, and succeeds
// only if at least one other node holds it when any other node is alive:
// an accepted job's module must survive the loss of the node that took it.
// It returns at the first node's acknowledgement; the push to the second
// goes on in the background (at most backgroundPuts at a time; past that
// the second copy is dropped). Waiting for both held every large submit for
// the QUIC idle timeout (30 s) when one of the two died mid-push (a
// leader killed while a follower replicated to it). A blob known to be
// held by a live peer already is not pushed again.
func (b *blobNet) Put(data []byte) (string, error) {
	hash, err := b.local.Put(data)
	if err != nil {
		return "", err
	}
	others := b.others()
	if len(others) == 0 || b.heldBy(hash, others) {
		return hash, nil
	}
	targets := others[:min(2, len(others))]
	ctx, cancel := context.WithTimeout(context.Background(), blobIOTimeout)
	type result struct {
		id  string
		err error
	}
	results := make(chan result, len(targets)) // buffered: the late push never blocks
	for _, m := range targets {
		go func(m cluster.Member) {
			err := b.push(ctx, m.Address, hash, data)
			if err == nil {
				b.addHolder(hash, m.ID)
			}
			results <- result{m.ID, err}
		}(m)
	}
	var errs []error
	for range targets {
		r := <-results
		if r.err == nil {
			left := len(targets) - 1 - len(errs) // pushes still under way
			finish := func() {
				for ; left > 0; left-- {
					<-results
				}
				cancel()
			}
			if left == 0 {
				cancel()
				return hash, nil
			}
			select {
			case b.background <- struct{}{}:
				go func() { // release the context and the slot once the others end
					defer func() { <-b.background }()
					finish()
				}()
			default:
				// Enough pushes (and the bytes they hold) are under way in
				// the background already, e.g. a recovered node
				// replicating every blob it holds: the extra copy is
				// dropped (one other node holds the blob, which is what a
				// Put promises) rather than waited for, which held every
				// submit behind a slow or dead peer again.
				cancel()
				b.dropped.Add(1)
				go finish() // reap the cancelled pushes
			}
			return hash, nil
		}
		errs = append(errs, r.err)
	}
	cancel()
	return "", fmt.Errorf("could not replicate module to another node: %w", errors.Join(errs...))
}

// addHolder records that node id acknowledged holding hash.
func (b *blobNet) addHolder(hash, id string) {
	b.heldMu.Lock()
	defer b.heldMu.Unlock()
	ids, _ := b.held.Get(hash)
	if !slices.Contains(ids, id) {
		b.held.Add(hash, append(slices.Clip(ids), id))
	}
}

// heldBy reports whether hash is known to be held by one of the live
// nodes in others (it acknowledged a push of it from this node).
func (b *blobNet) heldBy(hash string, others []cluster.Member) bool {
	ids, ok := b.held.Get(hash)
	if !ok {
		return false
	}
	for _, m := range others {
		if slices.Contains(ids, m.ID) {
			return true
		}
	}
	return false
}

// heldByLive is heldBy(hash, b.others()) without listing the members:
// whether a live peer acknowledged holding hash.
func (b *blobNet) heldByLive(hash string) bool {
	ids, _ := b.held.Get(hash)
	for _, id := range ids {
		if id != b.self && b.alive(id) {
			return true
		}
	}
	return false
}

// Locate makes hash available locally (fetching it from a peer if needed)
// and replicated like a fresh Put; it fails if no node holds it. A blob
// this node holds, and knows a live peer holds, costs neither a read nor a
// push: only a look at the local store.
func (b *blobNet) Locate(hash string) error {
	if b.local.Renew(hash) { // named again: not collectable until the commit names it
		if b.heldByLive(hash) || len(b.others()) == 0 {
			return nil
		}
	}
	data, err := b.Get(hash)
	if err != nil {
		return err
	}
	_, err = b.Put(data)
	return err
}
